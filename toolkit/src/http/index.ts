export * from './app.js';
export * from './version.js';
export * from './shared-folder.js';
export * from './tls.js';
export * from './limits.js';
export * from './batch.js';
