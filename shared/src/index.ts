// @capstan/shared: the contract between agent, relayd and server (errors, config, protocol
// constants, run logs, S/MIME, envelopes, policy bundles, the filter language, compliance,
// identity tokens, the remote-run wire protocol). The daemons' toolkit (spool, HTTP, providers…)
// is @capstan/toolkit. The agent imports the modules it uses by subpath
// (`@capstan/shared/errors`, …) so that a run loads only those.
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
export * from './remote-run/protocol.js';
export * from './batch.js';
