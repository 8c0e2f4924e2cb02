// Curated public surface of @capstan/shared: the contract between agent, relayd and server.
export * from './errors.js';
export * from './runlog/index.js';
export * from './smime/index.js';
export * from './envelope/index.js';
