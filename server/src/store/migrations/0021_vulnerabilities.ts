/**
 * Version 21: vulnerabilities (server/src/vulns/, docs/vulnerabilities.md). Advisories as the
 * matching needs them (the validated document as JSON text, with its id, `modified`, withdrawal,
 * CVE ids and rating beside it), the CVE ids each advisory is known by (lookups both ways), KEV
 * and EPSS by CVE, each configured feed's state, every node's findings with their reason, the
 * names each node is looked up by (which nodes a changed advisory may touch; both go with their
 * node), and mutes.
 */
import type { Migration } from './index.js';

const tables = (t: string, json: string) => `
CREATE TABLE vuln_advisories (
  id ${t} PRIMARY KEY,
  modified ${t} NOT NULL,
  withdrawn ${t},
  summary ${t},
  rating ${t},
  cves ${json} NOT NULL,
  doc ${json} NOT NULL
)__STRICT__;
CREATE TABLE vuln_advisory_cves (
  cve ${t} NOT NULL,
  advisory ${t} NOT NULL,
  PRIMARY KEY (cve, advisory)
)__STRICT__;
CREATE INDEX vuln_advisory_cves_advisory_idx ON vuln_advisory_cves (advisory);
CREATE TABLE vuln_kev (
  cve ${t} PRIMARY KEY,
  date_added ${t} NOT NULL,
  due_date ${t},
  ransomware ${t}
)__STRICT__;
CREATE TABLE vuln_epss (
  cve ${t} PRIMARY KEY,
  epss __REAL__ NOT NULL,
  percentile __REAL__ NOT NULL
)__STRICT__;
CREATE TABLE vuln_feeds (
  name ${t} PRIMARY KEY,
  source ${t} NOT NULL,
  imported_at ${t},
  feed_date ${t},
  report ${json},
  error ${t}
)__STRICT__;
CREATE TABLE vuln_findings (
  node_id ${t} NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  advisory ${t} NOT NULL,
  package ${t} NOT NULL,
  version ${t} NOT NULL,
  rating ${t},
  fixed ${t},
  match ${json} NOT NULL,
  found_at ${t} NOT NULL,
  PRIMARY KEY (node_id, advisory, package)
)__STRICT__;
CREATE INDEX vuln_findings_advisory_idx ON vuln_findings (advisory, node_id);
CREATE TABLE vuln_node_names (
  name ${t} NOT NULL,
  node_id ${t} NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  PRIMARY KEY (name, node_id)
)__STRICT__;
CREATE INDEX vuln_node_names_node_idx ON vuln_node_names (node_id);
CREATE TABLE vuln_mutes (
  id ${t} PRIMARY KEY,
  target ${t} NOT NULL,
  mute_groups ${json},
  reason ${t} NOT NULL,
  expires ${t},
  created_at ${t} NOT NULL,
  created_by ${t} NOT NULL
)__STRICT__;
`;

const sqlite = tables('TEXT', 'TEXT').replaceAll('__STRICT__', ' STRICT').replaceAll('__REAL__', 'REAL');
const postgres = tables('text COLLATE "C"', 'text').replaceAll('__STRICT__', '').replaceAll('__REAL__', 'double precision');

export const vulnerabilities: Migration = { version: 21, name: 'vulnerabilities', sqlite, postgres };
