/**
 * A local EC2 endpoint on 127.0.0.1 speaking the real Query protocol (form-encoded POST,
 * XML answers with the 2016-11-15 namespace) from fixtures the test writes to a file: the SDK
 * is pointed at it by its `endpoint` setting and signs as usual; the region comes from the
 * signature's credential scope, as on AWS. Pages of `pageSize` reservations with NextToken, and
 * scripted throttling answers (503 RequestLimitExceeded, 429 Throttling) before real ones.
 * Not named `.test.ts`.
 */
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';

export interface FakeInstance {
  id: string;
  state: 'pending' | 'running' | 'stopping' | 'stopped' | 'shutting-down' | 'terminated';
  privateDns?: string;
  privateIp?: string;
  tags?: Record<string, string>;
}

/** The fixture file: per region, reservations of instances, and the account they belong to. */
export interface Ec2Fixture {
  account: string;
  regions: Record<string, FakeInstance[][]>;
}

export interface FakeEc2 {
  url: string;
  /** Every request seen: region, action, NextToken, answered status, access key id. */
  requests: Array<{ region: string; action: string; token: string | null; status: number; accessKey: string }>;
  /** Answer the next N requests with these throttling statuses first (503 and/or 429). */
  throttle(statuses: number[]): void;
  close(): Promise<void>;
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const CODES: Record<FakeInstance['state'], number> = { pending: 0, running: 16, 'shutting-down': 32, terminated: 48, stopping: 64, stopped: 80 };

function instanceXml(i: FakeInstance): string {
  const tags = Object.entries(i.tags ?? {}).map(([k, v]) => `<item><key>${esc(k)}</key><value>${esc(v)}</value></item>`).join('');
  return `<item><instanceId>${esc(i.id)}</instanceId><imageId>ami-1</imageId>
    <instanceState><code>${CODES[i.state]}</code><name>${i.state}</name></instanceState>
    <privateDnsName>${esc(i.privateDns ?? '')}</privateDnsName><dnsName/>
    ${i.privateIp ? `<privateIpAddress>${esc(i.privateIp)}</privateIpAddress>` : ''}
    <instanceType>t3.micro</instanceType><tagSet>${tags}</tagSet></item>`;
}

export async function startFakeEc2(fixtureFile: string, pageSize = 2): Promise<FakeEc2> {
  const requests: FakeEc2['requests'] = [];
  const pending: number[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      const auth = String(req.headers.authorization ?? '');
      const scope = /Credential=([^/]+)\/\d{8}\/([^/]+)\/ec2\/aws4_request/.exec(auth);
      const region = scope?.[2] ?? '';
      const action = form.get('Action') ?? '';
      const token = form.get('NextToken');
      const send = (status: number, xml: string) => {
        requests.push({ region, action, token, status, accessKey: scope?.[1] ?? '' });
        res.writeHead(status, { 'content-type': 'text/xml;charset=UTF-8' });
        res.end(`<?xml version="1.0" encoding="UTF-8"?>\n${xml}`);
      };
      const error = (status: number, code: string, message: string) =>
        send(status, `<Response><Errors><Error><Code>${code}</Code><Message>${esc(message)}</Message></Error></Errors><RequestID>req-${requests.length}</RequestID></Response>`);
      if (!scope) return error(401, 'AuthFailure', 'AWS was not able to validate the provided access credentials');
      const throttled = pending.shift();
      if (throttled === 503) return error(503, 'RequestLimitExceeded', 'Request limit exceeded.');
      if (throttled !== undefined) return error(throttled, 'Throttling', 'Rate exceeded');
      if (action !== 'DescribeInstances') return error(400, 'InvalidAction', `The action ${action} is not valid for this web service.`);
      const fixture = JSON.parse(readFileSync(fixtureFile, 'utf8')) as Ec2Fixture;
      const reservations = fixture.regions[region];
      if (!reservations) return error(401, 'AuthFailure', `region ${region} is not enabled for this account`);
      const start = token ? Number(token.replace('page-', '')) : 0;
      const page = reservations.slice(start, start + pageSize);
      const next = start + pageSize < reservations.length ? `page-${start + pageSize}` : null;
      const body = page.map((instances, i) => `<item><reservationId>r-${start + i}</reservationId><ownerId>${fixture.account}</ownerId>
        <groupSet/><instancesSet>${instances.map(instanceXml).join('')}</instancesSet></item>`).join('');
      send(200, `<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>req-${requests.length}</requestId>
        <reservationSet>${body}</reservationSet>${next ? `<nextToken>${next}</nextToken>` : ''}</DescribeInstancesResponse>`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    throttle: (statuses) => void pending.push(...statuses),
    close: () => new Promise((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
  };
}
