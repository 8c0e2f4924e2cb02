/**
 * Version 28 is the kept generation batches' (another line of work that lands beside version
 * 29); until both are merged this stands in its place so that versions stay 1, 2, 3… Merging
 * replaces this file with that migration: a database must never be upgraded past 28 from here.
 */
import type { Migration } from './index.js';

export const reserved28: Migration = { version: 28, name: 'reserved', sqlite: '', postgres: '' };
