import { parseRunLog, parseRunInfo } from '@capstan/shared';
import fs from 'node:fs';
const dir = '/work/shared/conformance/rudder/files/runlogs';
for (const name of ['2018-08-24T15_55_01+00_00@e745a140-40bc-4b86-b6dc-084488fc906b.log', '2020-03-24T12_29_54+00_00@root.log']) {
  const buf = fs.readFileSync(`${dir}/${name}`);
  const ri = parseRunInfo(name);
  const info = { node_id: ri.nodeId, timestamp: ri.timestamp };
  for (let i = 0; i < 3000; i++) parseRunLog(buf, info);
  const runs = [];
  for (let r = 0; r < 5; r++) {
    const n = 5000;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) parseRunLog(buf, info);
    runs.push(Number(process.hrtime.bigint() - t0) / 1000 / n);
  }
  runs.sort((a, b) => a - b);
  console.log(name.slice(0, 10), `${buf.length} B: median ${runs[2].toFixed(1)} µs/parse (min ${runs[0].toFixed(1)}, max ${runs[4].toFixed(1)})`);
}
