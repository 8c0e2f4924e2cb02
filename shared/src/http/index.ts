export * from './app.js';
export * from './version.js';
