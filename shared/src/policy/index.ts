export * from './bundle.js';
export * from './condition.js';
export * from './methods.js';
export * from './system.js';
export * from './keys.js';
