// Curated public surface of @capstan/shared: the contract between agent, relayd and server.
// Agents import '@capstan/shared/agent' (the same minus HTTP and spool plumbing).
export * from './agent.js';
export * from './spool/index.js';
export * from './http/index.js';
export * from './systemd.js';
