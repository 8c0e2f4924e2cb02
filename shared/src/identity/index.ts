export * from './token.js';
export * from './keyring.js';
export * from './renew.js';
export * from './state.js';
export * from './keeper.js';
