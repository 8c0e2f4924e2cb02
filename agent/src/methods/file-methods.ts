/** The file-writing methods (docs/policy.md, "File-writing methods"), in the order of their specs. */
import { fileBlockPresent, fileFromTemplate, fileKeyValue, fileReplace, iniValue } from './edit-methods.js';
import { symlinkAbsent, symlinkPresent, timezone } from './links.js';
import { aptRepository, yumRepository } from './repos.js';
import { cronEntry, sshAuthorizedKey, sudoersFile, systemdUnitFile } from './system-files.js';
import type { Method } from './types.js';

export const FILE_METHODS: ReadonlyArray<Method<any>> = [
  fileFromTemplate, fileBlockPresent, fileKeyValue, iniValue, fileReplace, symlinkPresent, symlinkAbsent,
  cronEntry, sshAuthorizedKey, sudoersFile, systemdUnitFile, timezone, aptRepository, yumRepository,
];
