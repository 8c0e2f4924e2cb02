/**
 * The service methods against a real systemd: a throwaway root boots systemd as its PID 1
 * (test/helpers/root.ts), and the methods' systemctl calls start, stop, enable, disable, restart
 * and reload a unit there, proven by what the unit itself records and by systemd's own answers.
 * The host name through hostnamectl is tested here too, since that path needs systemd.
 */
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import t from 'tap';
import { requiredInCi } from '../helpers/programs.js';
import { rootSkipReason, throwawayRoot } from '../helpers/root.js';

t.setTimeout(180_000);

// Each start and each reload leaves a line in /run, so restarts and reloads are counted, not guessed.
const UNIT = `[Unit]
Description=Capstan test service
DefaultDependencies=no
[Service]
ExecStartPre=/bin/sh -c 'echo start >> /run/capstan-demo.starts'
ExecStart=/bin/sh -c 'trap "echo reload >> /run/capstan-demo.reloads" HUP; while :; do sleep 1 & wait $!; done'
ExecReload=/bin/kill -HUP $MAINPID
[Install]
WantedBy=multi-user.target
`;

const why = await rootSkipReason({ systemd: true });
// hostnamectl asks systemd-hostnamed, over D-Bus.
const dbusWhy = why ?? (requiredInCi(!existsSync('/usr/bin/dbus-daemon') && 'dbus-daemon is not installed (hostnamectl needs it)') || undefined);
t.test('service methods start, stop, enable, disable, restart and reload a unit under systemd', { skip: why }, async (t) => {
  const root = await throwawayRoot(t, { systemd: true });
  const wrote = await root.sh(`cat > /etc/systemd/system/capstan-demo.service <<'EOF'\n${UNIT}EOF\nsystemctl daemon-reload`);
  t.equal(wrote.code, 0, wrote.stderr);
  const svc = { name: 'capstan-demo' };
  const out = await root.methods([
    { method: 'service_running', params: svc, mode: 'audit' },
    { method: 'service_running', params: svc },
    { method: 'service_running', params: svc },
    { method: 'service_enabled', params: svc },
    { method: 'service_enabled', params: svc, mode: 'audit' },
    { method: 'service_restarted', params: svc, mode: 'audit' },
    { method: 'service_restarted', params: svc, dryRun: true },
    { method: 'service_restarted', params: svc },
    { method: 'service_reloaded', params: svc },
  ]);
  t.match(out[0], [{ component: 'Service running', key: 'capstan-demo', status: 'noncompliant' }]);
  t.same(out.slice(1, 5).map((o) => o[0]!.status), ['repaired', 'success', 'repaired', 'compliant']);
  t.match(out[5], [{ component: 'Service restarted', status: 'na', message: /action/ }], 'an action has nothing to audit');
  t.match(out[6], [{ status: 'noncompliant', message: 'would repair: restart capstan-demo' }]);
  t.match(out[7], [{ status: 'repaired', message: 'capstan-demo was restarted' }]);
  t.match(out[8], [{ component: 'Service reloaded', status: 'repaired' }]);
  // The reload signal is handled after systemctl returns: polled for, up to 5 s.
  const seen = await root.sh('systemctl is-enabled capstan-demo; wc -l < /run/capstan-demo.starts; for i in $(seq 100); do [ -s /run/capstan-demo.reloads ] && break; sleep 0.05; done; wc -l < /run/capstan-demo.reloads');
  t.equal(seen.stdout, 'enabled\n2\n1\n', 'enabled, started twice (a restart), reloaded once; the dry run did nothing');

  const down = await root.methods([
    { method: 'service_stopped', params: svc, mode: 'audit' },
    { method: 'service_stopped', params: svc },
    { method: 'service_stopped', params: svc },
    { method: 'service_disabled', params: svc, mode: 'audit' },
    { method: 'service_disabled', params: svc },
    { method: 'service_disabled', params: svc },
    { method: 'service_reloaded', params: svc },
    { method: 'service_stopped', params: { name: 'capstan-no-such' } },
    { method: 'service_disabled', params: { name: 'capstan-no-such' } },
    { method: 'service_restarted', params: { name: 'capstan-no-such' } },
  ]);
  t.match(down[0], [{ component: 'Service stopped', status: 'noncompliant', message: 'capstan-demo is running' }]);
  t.match(down[3], [{ component: 'Service disabled', status: 'noncompliant', message: 'capstan-demo is enabled' }]);
  t.same(down.map((o) => o[0]!.status).filter((_, i) => [1, 2, 4, 5].includes(i)), ['repaired', 'success', 'repaired', 'success']);
  t.match(down[6], [{ status: 'error', message: /systemctl exited 1/ }], 'a stopped service cannot be reloaded');
  t.same(down.slice(7, 9).map((o) => o[0]!.status), ['success', 'success'], 'a unit that does not exist is neither running nor enabled');
  t.match(down[9], [{ status: 'error', message: /systemctl exited/ }], 'restarting it is an error');
  t.equal((await root.sh('systemctl is-active capstan-demo || true; systemctl is-enabled capstan-demo || true')).stdout, 'inactive\ndisabled\n');
});

t.test('hostname under systemd goes through hostnamectl: static and live name, the host\'s untouched', { skip: dbusWhy }, async (t) => {
  const root = await throwawayRoot(t, { systemd: true });
  const before = hostname();
  const out = await root.methods([
    { method: 'hostname', params: { name: 'web-01.example.org' }, mode: 'audit' },
    { method: 'hostname', params: { name: 'web-01.example.org' } },
    { method: 'hostname', params: { name: 'web-01.example.org' } },
  ]);
  t.match(out[0], [{ component: 'Hostname', key: 'web-01.example.org', status: 'noncompliant', message: /says .*, the live host name is / }]);
  t.match(out[1], [{ status: 'repaired', diff: { diff: /^--- a\/etc\/hostname\n\+\+\+ b\/etc\/hostname\n.*\+web-01\.example\.org\n.*hostname .* → web-01\.example\.org\n$/s } }]);
  t.match(out[2], [{ status: 'success' }]);
  t.equal((await root.sh('cat /etc/hostname; hostname; hostnamectl --static')).stdout, 'web-01.example.org\n'.repeat(3));
  t.equal(hostname(), before);
});
