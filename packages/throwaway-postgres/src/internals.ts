/**
 * `throwaway-postgres/internals`: the building blocks the repository's suites use on their own (a free port, the
 * process table, the server registry, the owner watchdog, the native binaries, the directory reaper).
 */
export { findFreePort } from './free-port';
export { isRunning, processesUsing } from './process-table';
export type { ProcessInfo } from './process-table';
export { registryDir } from './server-registry';
export type { RegistryEntry } from './server-registry';
export { startOwnerWatchdog } from './owner-watchdog';
export type { OwnerWatchdog } from './owner-watchdog';
export { locateNativeBinaries } from './native-binaries';
export type { NativeBinaries } from './native-binaries';
export { reapDirectory } from './directory-reaper';
