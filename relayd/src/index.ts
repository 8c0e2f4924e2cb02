export * from './daemon.js';
export * from './config.js';
export { buildApp } from './api/app.js';
export { NodesList, parseKeyHash } from './data/nodes.js';
