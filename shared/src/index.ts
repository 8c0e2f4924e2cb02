// Curated public surface of @capstan/shared: the contract between agent, relayd and server.
export * from './errors.js';
export * from './log.js';
export * from './config.js';
export * from './protocol.js';
export * from './runlog/index.js';
export * from './smime/index.js';
export * from './envelope/index.js';
export * from './spool/index.js';
export * from './http/index.js';
export * from './policy/index.js';
