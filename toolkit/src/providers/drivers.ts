/** A manager's driver, and one poll through it. */
import { capstanError } from '@capstan/shared/errors';
import { applyFilters } from './filters.js';
import { awsDriver } from './aws-ec2.js';
import { staticDriver } from './static.js';
import type { DiscoveredInstance, Driver, ManagerSpec } from './types.js';

export interface DriverOptions {
  /** Where `env` credential references are read (the provider host's environment). */
  env?: NodeJS.ProcessEnv;
}

export async function driverFor(spec: ManagerSpec, opts: DriverOptions = {}): Promise<Driver> {
  switch (spec.type) {
    case 'aws-ec2':
      return awsDriver(spec, opts.env);
    case 'static':
      return staticDriver(spec);
    case 'azure-vm':
      return (await import('./azure-vm.js')).azureDriver(spec, opts.env);
    case 'gcp':
      return (await import('./gcp.js')).gcpDriver(spec, opts.env);
    default:
      throw capstanError('ERR_MANAGER_INVALID', `no driver for type ${String((spec as { type: unknown }).type)}`);
  }
}

/** One poll: every instance the driver lists that the manager's filters keep. */
export async function discover(spec: ManagerSpec, opts: DriverOptions = {}, signal?: AbortSignal): Promise<DiscoveredInstance[]> {
  const driver = await driverFor(spec, opts);
  return applyFilters(spec.filters, await driver.list(signal));
}
