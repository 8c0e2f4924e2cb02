/** The registry of generic methods a directive may name. */
import { commandCheck, commandRun, sysctlValue } from './system.js';
import { packageAbsent, packagePresent } from './packages.js';
import { serviceDisabled, serviceEnabled, serviceReloaded, serviceRestarted, serviceRunning, serviceStopped } from './services.js';
import { directoryPresent, fileAbsent, fileContent, fileFromSharedFolder, fileLinePresent, filePermissions } from './files.js';
import { archiveFromSharedFolder } from './archive.js';
import { FILE_METHODS } from './file-methods.js';
import { groupAbsent, groupPresent, userAbsent, userPresent } from './accounts.js';
import { mountAbsent, mountPresent } from './mounts.js';
import { hostname, kernelModuleLoaded } from './host.js';
import type { Method } from './types.js';

export const METHODS: ReadonlyMap<string, Method<any>> = new Map(
  [
    fileContent, fileLinePresent, fileAbsent, filePermissions, directoryPresent, fileFromSharedFolder,
    archiveFromSharedFolder, packagePresent, packageAbsent, serviceRunning, serviceEnabled, commandCheck, commandRun, sysctlValue,
    ...FILE_METHODS,
    serviceStopped, serviceDisabled, serviceRestarted, serviceReloaded, userPresent, userAbsent, groupPresent, groupAbsent,
    kernelModuleLoaded, mountPresent, mountAbsent, hostname,
  ].map((m) => [m.name, m as Method<any>]),
);

export * from './types.js';
