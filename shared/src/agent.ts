// The part of @capstan/shared an agent needs: no HTTP server and no spool watcher, so the one-shot
// agent does not load fastify or chokidar (they cost it ~25 MB of RSS per run).
export * from './errors.js';
export * from './dir.js';
export * from './log.js';
export * from './config.js';
export * from './protocol.js';
export * from './usage.js';
export * from './version.js';
export * from './runlog/index.js';
export * from './smime/index.js';
export * from './envelope/index.js';
export * from './policy/index.js';
export * from './filter/index.js';
export * from './compliance/index.js';
export * from './identity/index.js';
