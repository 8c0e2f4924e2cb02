export * from './run.js';
export * from './config.js';
