export * from './bundle.js';
export * from './condition.js';
