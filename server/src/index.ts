export * from './server.js';
export * from './config.js';
export { buildApp } from './api/app.js';
