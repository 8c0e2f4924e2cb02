/**
 * Version 5: jobs — a run or an inventory triggered on many nodes through the relays.
 * - jobs: one row per job, what the admin asked for (static nodes and selectors kept as given),
 *   its deadline and whether it is running, finished or cancelled.
 * - job_tasks: one row per (job, node) with the task's current state, reason and output. No
 *   foreign key to nodes: a job's record outlives a node deleted meanwhile.
 * - job_task_transitions: every transition with its reason and time (the audit trail).
 * Retention deletes whole finished jobs, their tasks and transitions going with them.
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  state TEXT NOT NULL,
  spec TEXT NOT NULL,
  conditions TEXT NOT NULL,
  keep_output INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  deadline_at TEXT NOT NULL,
  finished_at TEXT
) STRICT;
CREATE INDEX jobs_state_deadline ON jobs (state, deadline_at);
CREATE INDEX jobs_created ON jobs (created_at);

CREATE TABLE job_tasks (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  node_id TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  message TEXT,
  relay TEXT,
  exit_code INTEGER,
  output TEXT,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (job_id, node_id)
) STRICT;
CREATE INDEX job_tasks_state ON job_tasks (state, job_id);

CREATE TABLE job_task_transitions (
  id INTEGER PRIMARY KEY,
  job_id TEXT NOT NULL,
  node_id TEXT NOT NULL,
  at TEXT NOT NULL,
  from_state TEXT,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL,
  message TEXT,
  FOREIGN KEY (job_id, node_id) REFERENCES job_tasks (job_id, node_id) ON DELETE CASCADE
) STRICT;
CREATE INDEX job_task_transitions_task ON job_task_transitions (job_id, node_id, id);
`;

const postgres = `
CREATE TABLE jobs (
  id text COLLATE "C" PRIMARY KEY,
  name text NOT NULL,
  type text NOT NULL,
  state text NOT NULL,
  spec jsonb NOT NULL,
  conditions jsonb NOT NULL,
  keep_output boolean NOT NULL,
  timeout_ms bigint NOT NULL,
  created_at timestamptz NOT NULL,
  deadline_at timestamptz NOT NULL,
  finished_at timestamptz
);
CREATE INDEX jobs_state_deadline ON jobs (state, deadline_at);
CREATE INDEX jobs_created ON jobs (created_at);

CREATE TABLE job_tasks (
  job_id text COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  node_id text COLLATE "C" NOT NULL,
  state text NOT NULL,
  reason text NOT NULL,
  message text,
  relay text,
  exit_code integer,
  output text,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (job_id, node_id)
);
CREATE INDEX job_tasks_state ON job_tasks (state, job_id);

CREATE TABLE job_task_transitions (
  id bigserial PRIMARY KEY,
  job_id text COLLATE "C" NOT NULL,
  node_id text COLLATE "C" NOT NULL,
  at timestamptz NOT NULL,
  from_state text,
  to_state text NOT NULL,
  reason text NOT NULL,
  message text,
  FOREIGN KEY (job_id, node_id) REFERENCES job_tasks (job_id, node_id) ON DELETE CASCADE
);
CREATE INDEX job_task_transitions_task ON job_task_transitions (job_id, node_id, id);
`;

export const jobs: Migration = { version: 5, name: 'jobs', sqlite, postgres };
