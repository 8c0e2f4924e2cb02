/**
 * One transaction on one pooled connection, for the PostgreSQL store and its parts (identity,
 * jobs, managers). A connection whose ROLLBACK failed is broken and is dropped from the pool
 * rather than handed to the next caller; every error comes out as a store error naming `what`.
 */
import type pg from 'pg';
import { storeError } from '../errors.js';

export async function inTransaction<T>(pool: pg.Pool, what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  let c: pg.PoolClient;
  try {
    c = await pool.connect();
  } catch (err) {
    throw storeError(what, err);
  }
  try {
    await c.query('BEGIN');
    const result = await fn(c);
    await c.query('COMMIT');
    c.release();
    return result;
  } catch (err) {
    await c.query('ROLLBACK').then(() => c.release(), (e: Error) => c.release(e));
    throw storeError(what, err);
  }
}
