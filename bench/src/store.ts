/**
 * The server's registry store, as the benchmarks use it. Every benchmark reaches the store through
 * this file, so a move of the store's files inside the server changes one file here.
 */
export { openStore, type ChangeQuery, type NodeFilter, type NodeListQuery, type Store } from '@capstan/server/store/index';
export { NODE_COLUMNS } from '@capstan/server/store/nodes/records';
export { packOutcomes } from '@capstan/server/store/runs/outcomes';
