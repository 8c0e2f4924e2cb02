// The systemd-notify package ships no types: it spawns `systemd-notify` with these options.
declare module 'systemd-notify' {
  interface NotifyOptions {
    ready?: boolean;
    status?: string;
    pid?: number;
  }
  function notify(opts?: NotifyOptions): Promise<unknown>;
  export default notify;
}
