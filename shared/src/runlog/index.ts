// Run logs: file names (who, when, how compressed) and RUDDER's report format.
export * from './name.js';
export * from './parse.js';
export { rfc3339Utc } from './time.js';
export * from './diff.js';
