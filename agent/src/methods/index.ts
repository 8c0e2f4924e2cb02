/** The registry of generic methods a directive may name. */
import { commandCheck, commandRun, packageAbsent, packagePresent, serviceEnabled, serviceRunning, sysctlValue } from './system.js';
import { directoryPresent, fileAbsent, fileContent, fileFromSharedFolder, fileLinePresent, filePermissions } from './files.js';
import { archiveFromSharedFolder } from './archive.js';
import { FILE_METHODS } from './file-methods.js';
import type { Method } from './types.js';

export const METHODS: ReadonlyMap<string, Method<any>> = new Map(
  [
    fileContent, fileLinePresent, fileAbsent, filePermissions, directoryPresent, fileFromSharedFolder,
    archiveFromSharedFolder, packagePresent, packageAbsent, serviceRunning, serviceEnabled, commandCheck, commandRun, sysctlValue,
    ...FILE_METHODS,
  ].map((m) => [m.name, m as Method<any>]),
);

export * from './types.js';
