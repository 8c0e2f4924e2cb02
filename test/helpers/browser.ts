/**
 * A real browser for the console's tests: Debian's Chromium (`apt-get install chromium`) driven
 * by playwright-core, which never downloads a browser. Each test gets a fresh profile in a
 * temporary directory. Outside CI a missing Chromium is a skip with the reason; in CI it fails
 * (.ci/run installs it). A test that fails leaves a screenshot of the page it was on.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import type { Test } from 'tap';
import { ROOT, requiredInCi } from './programs.js';

export const CHROMIUM = process.env.CAPSTAN_CHROMIUM ?? '/usr/bin/chromium';
/** Where failing browser tests leave their screenshots. */
export const FAILURE_DIR = join(ROOT, '.tap', 'browser-failures');

const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

/** Why the browser tests cannot run here (false: they can). Throws in CI. */
export function chromiumAbsent(): false | string {
  return requiredInCi(existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CAPSTAN_CHROMIUM)`, '.ci/run installs chromium');
}

export interface Browsing {
  context: BrowserContext;
  page: Page;
  /** Content-Security-Policy violations and uncaught errors the pages reported. */
  problems: string[];
}

/** A fresh browser and page for `t`, closed in its teardown (after a screenshot if `t` failed). */
export async function openBrowser(t: Test, name: string): Promise<Browsing> {
  const profile = await mkdtemp(join(tmpdir(), 'capstan-chromium-'));
  // The profile directory is playwright's to pass (--user-data-dir), a fresh one each time.
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1280, height: 900 } });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const problems: string[] = [];
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to (load|apply|execute)/i.test(m.text())) problems.push(`csp: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  t.teardown(async () => {
    if (!t.passing()) {
      mkdirSync(FAILURE_DIR, { recursive: true });
      const file = join(FAILURE_DIR, `${name}-${Date.now()}.png`);
      await page.screenshot({ path: file, fullPage: true }).then(() => t.comment(`screenshot of the failure: ${file} (${page.url()})`), () => undefined);
    }
    await context.close();
    await rm(profile, { recursive: true, force: true });
  });
  return { context, page, problems };
}

/** Where the docs' screenshots go when CAPSTAN_UPDATE_SCREENSHOTS=1 (docs/console.md); null: none taken. */
export const SHOTS = process.env.CAPSTAN_UPDATE_SCREENSHOTS === '1' ? join(ROOT, 'docs', 'img') : null;

/**
 * A full-page screenshot for the docs (only with CAPSTAN_UPDATE_SCREENSHOTS=1), or of the element
 * `only` selects, with `prefix`
 * (the test's root directory) taken off every text and input on the page first, so that paths
 * read as on a host.
 */
export async function shot(page: Page, name: string, prefix: string, only?: string): Promise<void> {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  // A string: the test's TypeScript has no DOM types.
  await page.evaluate(`(() => {
    const p = ${JSON.stringify(prefix)};
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) if (n.nodeValue && n.nodeValue.includes(p)) n.nodeValue = n.nodeValue.split(p).join('');
    for (const el of document.querySelectorAll('input, textarea')) if (el.value.includes(p)) el.value = el.value.split(p).join('');
  })()`);
  // `only`: the element of that selector alone (one section of a long page).
  if (only) await page.locator(only).screenshot({ path: join(SHOTS, name) });
  else await page.screenshot({ path: join(SHOTS, name), fullPage: true });
}

/**
 * One browser for `t` with a fresh context (cookies, storage, cache of its own: a separate
 * sign-in) per name, in that order: what `openBrowser` gives each, for one launch of Chromium
 * instead of one per user (a launch costs about a second of CPU). Closed in `t`'s teardown, each
 * page screenshotted first if `t` failed.
 */
export async function openBrowsers<const N extends readonly string[]>(t: Test, names: N): Promise<{ -readonly [K in keyof N]: Browsing }> {
  // The teardown is registered at once (before the launch is awaited), so that a caller may start
  // this beside other work and a test that ends first still closes the browser.
  const launched = chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
  const opened: Array<Browsing & { name: string }> = [];
  t.teardown(async () => {
    const browser = await launched.catch(() => null);
    for (const { name, page } of opened) {
      if (t.passing()) break;
      mkdirSync(FAILURE_DIR, { recursive: true });
      const file = join(FAILURE_DIR, `${name}-${Date.now()}.png`);
      await page.screenshot({ path: file, fullPage: true }).then(() => t.comment(`screenshot of the failure: ${file} (${page.url()})`), () => undefined);
    }
    await browser?.close();
  });
  const browser = await launched;
  for (const name of names) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(15_000);
    const problems: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to (load|apply|execute)/i.test(m.text())) problems.push(`csp: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    opened.push({ name, context, page, problems });
  }
  return opened.map(({ context, page, problems }) => ({ context, page, problems })) as { -readonly [K in keyof N]: Browsing };
}
