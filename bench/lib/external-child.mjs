// @ts-check
/**
 * Runs one package benchmark in a process of its own and prints its result as one JSON line.
 * A fresh process keeps the runner's memory out of the benchmark's figures: Linux carries a
 * process's peak RSS (ru_maxrss) across fork and exec, so a program a benchmark spawns from a
 * big process reports at least that process's size as its own peak.
 *
 *   node bench/lib/external-child.mjs <module> <export> '<options as JSON>'
 */
const [specifier, exportName, json] = process.argv.slice(2);
const mod = await import(/** @type {string} */ (specifier));
const opts = { ...JSON.parse(json ?? '{}'), log: (/** @type {string} */ line) => process.stderr.write(`${line}\n`) };
const result = await mod[/** @type {string} */ (exportName)](opts);
process.stdout.write(`${JSON.stringify(result)}\n`);
