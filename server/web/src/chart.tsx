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

type BarsBuilder = (o: { size: [number, number]; align?: -1 | 0 | 1 }) => uPlot.Series.PathBuilder;
const barsOf = (uPlot.paths as { bars?: BarsBuilder }).bars;
/** Two bar series side by side in each bucket (changes per hour: intentional left, corrective right). */
export const barsLeft = barsOf?.({ size: [0.42, 30], align: 1 });
export const barsRight = barsOf?.({ size: [0.42, 30], align: -1 });
/** Whole numbers on a count axis. */
export const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 1_000_000];
