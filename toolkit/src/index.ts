// The daemons' toolkit: what the relay and the server share beyond the contract (spool, HTTP
// plumbing, systemd notify). Providers, the remote-run hub, the policy change feed and the relay
// bootstrap are imported by subpath (`@capstan/toolkit/providers/index`, …) by the program that
// uses them. The agent never loads this package.
export * from './spool/index.js';
export * from './http/index.js';
export * from './systemd.js';
