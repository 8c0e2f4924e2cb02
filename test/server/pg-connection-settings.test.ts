/**
 * What every pooled PostgreSQL connection of the store starts with (db.ts poolConfig): jit off,
 * random_page_cost 1.1, the store's schema first in the search path; and settings given in the
 * URL's own `options` come after those and win. Skipped with the reason when PostgreSQL is
 * unreachable (and failed instead when CI=true).
 */
import t from 'tap';
import { PostgresDb } from '@capstan/server/store/postgres/db';
import { PG_URL, postgresOrSkipFile } from './pg.js';

if (await postgresOrSkipFile(t)) {
  const settings = async (url: string, schema?: string) => {
    const db = new PostgresDb({ url, poolSize: 1, analyze: null, ...(schema !== undefined && { schema }) });
    try {
      const { rows } = await db.query<{ jit: string; rpc: string; path: string }>('settings',
        "SELECT current_setting('jit') AS jit, current_setting('random_page_cost') AS rpc, current_setting('search_path') AS path");
      return rows[0]!;
    } finally {
      await db.close();
    }
  };

  t.test('the store sets its own planner settings on each connection', async (t) => {
    t.match(await settings(PG_URL, 'capstan_settings_probe'), { jit: 'off', rpc: '1.1', path: 'capstan_settings_probe' });
  });

  t.test("the URL's options come after the store's and win", async (t) => {
    const u = new URL(PG_URL);
    u.searchParams.set('options', '-c random_page_cost=4 -c jit=on');
    t.match(await settings(u.toString(), 'capstan_settings_probe'), { jit: 'on', rpc: '4', path: 'capstan_settings_probe' });
  });
}
