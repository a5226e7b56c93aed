// graphile-worker's peer bench of docs/benchmarks.md: its throughput on the
// PostgreSQL taskgraph's bench uses, measured as taskgraph's bench measures
// its own (noop jobs inserted first, then the time from the runner's start
// until every one is completed).
//
//   cd internal/bench/peers/graphile
//   npm ci
//   node bench.mjs --db 'postgres://postgres@127.0.0.1:5432/bench?sslmode=disable' --jobs 100000 --concurrency 100
//
// It migrates graphile-worker's tables into a schema of its own
// (graphile_bench_...), and drops it at the end. --batched turns on
// graphile-worker's local queue (jobs fetched in batches) and batched
// completions, its fastest settings.
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Logger, makeWorkerUtils, run } from 'graphile-worker';

const { values: opts } = parseArgs({
  options: {
    db: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/bench?sslmode=disable' },
    jobs: { type: 'string', default: '50000' },
    concurrency: { type: 'string', default: '100' },
    batched: { type: 'boolean', default: false },
  },
});
const jobs = Number(opts.jobs);
const concurrency = Number(opts.concurrency);
if (!Number.isInteger(jobs) || jobs < 1) throw new Error('--jobs must be a whole number of at least 1');
if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error('--concurrency must be a whole number of at least 1');

// A log line per job would be most of what is measured: errors only.
const logger = new Logger(() => (level, message) => {
  if (level === 'error') console.error(message);
});

const schema = `graphile_bench_${randomBytes(6).toString('hex')}`;
const utils = await makeWorkerUtils({ connectionString: opts.db, schema, logger });
let runner = null;
try {
  await utils.migrate();
  for (let sent = 0; sent < jobs; sent += 1000) {
    const n = Math.min(1000, jobs - sent);
    await utils.addJobs(Array.from({ length: n }, () => ({ identifier: 'noop', payload: {} })));
  }

  let done = 0;
  let finish;
  const all = new Promise((resolve) => {
    finish = resolve;
  });
  const worker = opts.batched ? { localQueue: { size: concurrency + 1 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } : {};
  const start = process.hrtime.bigint();
  runner = await run({
    connectionString: opts.db,
    schema,
    concurrency,
    maxPoolSize: Math.min(concurrency + 2, 32),
    noHandleSignals: true,
    pollInterval: 50,
    logger,
    preset: { worker },
    taskList: {
      noop: async () => {
        if (++done === jobs) finish();
      },
    },
  });
  await all;
  const wall = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`graphile-worker: ${jobs} jobs in ${wall.toFixed(3)}s: ${Math.round(jobs / wall)} jobs/s (concurrency ${concurrency}${opts.batched ? ', batched' : ''})`);
} finally {
  if (runner) await runner.stop();
  await utils.withPgClient((c) => c.query(`DROP SCHEMA ${schema} CASCADE`));
  await utils.release();
}
