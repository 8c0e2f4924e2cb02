export * from './parse.js';
export * from './version.js';
export * from './evaluate.js';
export * from './rpm-version.js';
export * from './properties.js';
