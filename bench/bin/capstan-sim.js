#!/usr/bin/env node
// Committed, with its run bit, so that npm links it at install time, before dist/ is built.
import '../dist/sim/cli.js';
