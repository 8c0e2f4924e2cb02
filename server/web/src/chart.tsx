/** uPlot in a Preact component: made once per data set, resized with its container. */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

export function Chart({ opts, data, label }: { opts: Omit<uPlot.Options, 'width' | 'height'>; data: uPlot.AlignedData; label: string }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const size = () => ({ width: Math.max(240, el.clientWidth), height: 220 });
    const plot = new uPlot({ ...opts, ...size() }, data, el);
    const ro = new ResizeObserver(() => plot.setSize(size()));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [opts, data]);
  return <div class="chart" ref={box} role="img" aria-label={label} />;
}

/** Bars for uPlot series (changes per hour or day). */
export const bars = (uPlot.paths as { bars?: (o: { size: [number, number] }) => uPlot.Series.PathBuilder }).bars?.({ size: [0.8, 40] });
