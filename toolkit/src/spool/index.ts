export * from './spool.js';
export * from './processor.js';
export * from './upload.js';
export * from './recent.js';
export * from './ocs-pair.js';
export { startSpoolCleanup, type SpoolCleanupOptions, type SweepableSpool } from './housekeeping.js';
export * from './schema.js';
