// The end-to-end environment: the real taskgraph binary (built from this
// worktree) on SQLite in a temporary directory, and headless Chromium
// driven by playwright-core.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, existsSync, createWriteStream } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const screenshotDir = process.env.SCREENSHOT_DIR || path.join(repoRoot, 'artifacts', 'screenshots');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function portFree(port) {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function freePort() {
  // The range the project uses for local servers; then any port.
  const start = 18100 + Math.floor(Math.random() * 100);
  for (let i = 0; i < 100; i++) {
    const p = 18100 + ((start - 18100 + i) % 100);
    if (await portFree(p)) return p;
  }
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export class Server {
  // args are added to the server's command line (--token-file ...);
  // token, when set, is sent with gql and createTask.
  constructor({ args = [], token = '' } = {}) {
    this.args = args;
    this.token = token;
    this.tmp = mkdtempSync(path.join(os.tmpdir(), 'taskgraph-e2e-'));
    this.bin = path.join(this.tmp, 'taskgraph');
    this.dataDir = path.join(this.tmp, 'data');
    this.logFile = path.join(this.tmp, 'server.log');
    mkdirSync(this.dataDir);
  }

  build() {
    const t0 = Date.now();
    execFileSync('go', ['build', '-o', this.bin, '.'], { cwd: repoRoot, stdio: 'inherit' });
    console.log(`# built ${this.bin} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }

  async start() {
    if (!this.port) this.port = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    const log = createWriteStream(this.logFile, { flags: 'a' });
    this.proc = spawn(this.bin, ['--addr', `127.0.0.1:${this.port}`, '--data-dir', this.dataDir, '--shutdown-grace', '1s', '--workers', '4', ...this.args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc.stdout.pipe(log);
    this.proc.stderr.pipe(log);
    const exited = new Promise((resolve) => this.proc.once('exit', (code) => resolve(code)));
    this.exited = exited;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) throw new Error(`taskgraph exited with ${this.proc.exitCode}; log: ${this.logFile}`);
      try {
        const res = await fetch(`${this.url}/readyz`);
        if (res.ok) return;
      } catch {
        // not listening yet
      }
      await sleep(100);
    }
    throw new Error(`taskgraph not ready within 30 s; log: ${this.logFile}`);
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 15_000);
    await this.exited;
    clearTimeout(timer);
  }

  cleanup() {
    if (!process.env.KEEP_E2E_TMP) rmSync(this.tmp, { recursive: true, force: true });
  }

  async gql(query, variables = {}) {
    const res = await fetch(`${this.url}/query`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(this.token ? { Authorization: `Bearer ${this.token}` } : {}) },
      body: JSON.stringify({ query, variables }),
    });
    const body = await res.json();
    return body;
  }

  async createTask(input) {
    const body = await this.gql('mutation($input: CreateTaskInput!) { createTask(input: $input) { id code status } }', { input });
    if (body.errors) throw new Error(`createTask: ${JSON.stringify(body.errors)}`);
    return body.data.createTask;
  }
}

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-quic',
  '--disable-sync',
];

export async function launchBrowser() {
  if (!existsSync(chromiumPath)) throw new Error(`no Chromium at ${chromiumPath}: apt-get install -y chromium`);
  const userDataDir = mkdtempSync(path.join(os.tmpdir(), 'taskgraph-chromium-'));
  // A persistent context is how a fresh --user-data-dir is given.
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1366, height: 900 },
    acceptDownloads: true,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

export async function newEnv() {
  mkdirSync(screenshotDir, { recursive: true });
  const server = new Server();
  server.build();
  await server.start();
  const browser = await launchBrowser();
  const pageErrors = [];
  const env = {
    server,
    browser,
    pageErrors,
    url: (p = '') => `${server.url}/console/${p.replace(/^\//, '')}`,
    async page({ viewport } = {}) {
      const page = await browser.context.newPage();
      if (viewport) await page.setViewportSize(viewport);
      page.on('pageerror', (e) => pageErrors.push(`${page.url()}: ${e.message}`));
      // Bounded, yet patient with a machine busy with other builds and tests.
      page.setDefaultTimeout(30_000);
      return page;
    },
    async shot(page, name) {
      const file = path.join(screenshotDir, `${name}.png`);
      await page.screenshot({ path: file, fullPage: true });
      return file;
    },
    async close() {
      await browser.close().catch(() => {});
      await server.stop();
      server.cleanup();
    },
  };
  return env;
}

// markNoReload tags the page's window; noReload says whether the tag is
// still there (a reload or navigation by the browser would drop it).
export async function markNoReload(page) {
  await page.evaluate(() => {
    window.__e2eNoReload = true;
  });
}

export async function noReload(page) {
  return page.evaluate(() => window.__e2eNoReload === true);
}
