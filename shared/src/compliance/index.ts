// Compliance: one computation for the agent's summary and the server's figures.
export * from './compute.js';
