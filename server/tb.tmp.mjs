import { TouchBatcher } from './dist/policy/touches.js';
for (let k = 0; k < 10; k++) {
  const batches = [];
  let first = true;
  const b = new TouchBatcher(async (batch) => {
    batches.push([...batch]);
    if (first) {
      first = false;
      let p = Promise.resolve();
      for (let i = 0; i < k; i++) p = p.then(() => undefined);
      void p.then(() => b.touch('late'));
    }
  }, 0);
  b.touch('a');
  await b.settled();
  await new Promise((r) => setTimeout(r, 20));
  console.log(k, JSON.stringify(batches));
}
