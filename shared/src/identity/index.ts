export * from './token.js';
export * from './keyring.js';
export * from './renew.js';
