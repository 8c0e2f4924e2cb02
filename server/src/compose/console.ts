/**
 * The web console's parts: the sign-in secret (made at the first start), its built files, and
 * the compliance history its graph reads. A console that was not built answers `/` with how to
 * build it; the API is the same either way.
 */
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { ServerConfig } from '../config.js';
import { ComplianceHistory } from '../console/history.js';
import { ConsoleSignIns, ensureConsoleSecret } from '../console/signin.js';
import { CONSOLE_DIR, loadAssets, type Asset } from '../console/static.js';
import { complianceClock, complianceSettings } from '../registry/compliance.js';
import type { Store } from '../store/store.js';

export interface ConsoleParts {
  signIns: ConsoleSignIns;
  assets: Map<string, Asset>;
  history: ComplianceHistory | null;
}

export async function startConsole(config: ServerConfig, store: Store, log: Logger, tls: boolean): Promise<ConsoleParts> {
  const dataDir = config.general.data_dir;
  const secret = await ensureConsoleSecret(config.console.secret_file || join(dataDir, 'console.secret')).catch((err: Error) => {
    throw capstanError('ERR_STARTUP', `console secret: ${err.message}`);
  });
  const ended = { end: store.admins.endConsoleSignIn.bind(store.admins), isEnded: store.admins.consoleSignInEnded.bind(store.admins) };
  const signIns = new ConsoleSignIns({ secret, ttlMs: config.console.signin_ttl, secure: tls, ended });
  const assets = await loadAssets(CONSOLE_DIR);
  if (!assets.has('/index.html')) log.warn({ dir: CONSOLE_DIR }, 'the web console is not built (npm run build): / answers 404');
  const settings = complianceSettings(config);
  const history = config.console.history_interval > 0
    ? new ComplianceHistory({
      file: join(dataDir, 'compliance-history.jsonl'),
      intervalMs: config.console.history_interval,
      retentionMs: config.console.history_retention,
      summary: () => store.complianceSummary([], complianceClock(settings)),
      log,
    })
    : null;
  await history?.load();
  return { signIns, assets, history };
}
