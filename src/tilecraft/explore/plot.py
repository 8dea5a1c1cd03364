"""The sweep's fronts drawn: latency against each resource's share of the part, with and without
the requantization unit (and the depthwise mode)."""

from __future__ import annotations

from tilecraft.explore.pareto import RESOURCES

TITLES = {"lut": "LUT", "dsp": "DSP", "bram36": "BRAM (RAMB36)"}


def plot_fronts(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    good = [p for p in result["points"] if p["error"] is None]
    fig, axes = plt.subplots(1, len(RESOURCES), figsize=(5 * len(RESOURCES), 4.2), sharey=True)
    plain_fronts = result.get("fronts_without_unit", {})
    for ax, r in zip(axes, RESOURCES):
        on = set(result["fronts"].get(r, []))
        for p in good:
            x, y = 100 * p["fractions"][r], p["latency_ms"]
            colour = "tab:red" if p["name"] in on else "tab:gray"
            marker = "s" if p.get("depthwise_window") else "^" if p.get("requant_lanes") else "o"
            face = colour if p.get("compared", True) else "none"  # leaves more on the host
            ax.scatter(x, y, facecolors=face, edgecolors=colour, marker=marker, zorder=3)
            ax.annotate(p["name"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        for names, style in ((on, "-"), (set(plain_fronts.get(r, [])), "--")):
            line = sorted(
                (100 * p["fractions"][r], p["latency_ms"]) for p in good if p["name"] in names
            )
            if line:
                ax.step(*zip(*line), where="post", c="tab:red", lw=1, ls=style)
        ax.axvline(100, c="k", ls="--", lw=0.8)
        ax.set_xlabel(f"{TITLES[r]}, % of the {result['part']}")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{result['model']} accelerator latency (ms, cycle model)")
    trials = result.get("trials") or 0
    schedules = f"schedules tuned, {trials} trials a layer" if trials else "heuristic schedules"
    fig.suptitle(
        f"Design space on the {result['part']} ({schedules}): red = Pareto front, dashed = "
        f"front without the requantization unit (triangles: with it; squares: with it and the "
        f"depthwise mode; hollow: not compared, more layers left on the host)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
