// The parts of @capstan/shared the relay uses, imported module by module: the package index also
// loads S/MIME (node-forge), envelopes (zstd), identity tokens and policy code, ~24 MB of RSS
// that a relay, which forwards bytes and never verifies them, does not need (measured by bench.ts).
export * from '@capstan/shared/errors';
export * from '@capstan/shared/dir';
export * from '@capstan/shared/log';
export * from '@capstan/shared/config';
export * from '@capstan/shared/protocol';
export * from '@capstan/shared/usage';
export * from '@capstan/shared/systemd';
export * from '@capstan/shared/spool/index';
export * from '@capstan/shared/http/index';
