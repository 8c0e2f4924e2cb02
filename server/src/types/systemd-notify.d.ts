// systemd-notify ships no types: it spawns `systemd-notify` with --ready/--status/--pid.
declare module 'systemd-notify' {
  interface NotifyOptions {
    ready?: boolean;
    status?: string;
    pid?: number;
    booted?: boolean;
  }
  function notify(opts?: NotifyOptions): Promise<unknown>;
  export default notify;
}
