/* ptolab swimlane viewer: one <canvas> per stage, no DOM node per task, no network.
   Data comes from <script type="application/json" id=...> blocks (columnar, base64
   typed arrays).  window.ptolabSwimlanes exposes the viewers for the browser test. */
(function () {
  "use strict";
  var PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b",
                 "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#1f77b4", "#8c564b",
                 "#17becf", "#bcbd22", "#7f7f7f", "#d62728"];
  // the palette as little-endian RGBA words for the pixel buffer
  var COLORS = PALETTE.map(function (h) {
    var v = parseInt(h.slice(1), 16);
    return ((255 << 24) | ((v & 255) << 16) | (v & 0xff00) | (v >> 16)) >>> 0;
  });
  // lanes are 14 px, taller when there are few so a single busy core still reads as a
  // lane of bars; core-lane bars are at least MIN_BAR px wide so sub-pixel tasks show
  var ROW = 14, ROW_MAX = 30, FEW_LANES_PX = 240, MIN_BAR = 2;
  var AXIS = 22, LEFT = 120, MAX_ARROWS = 20000;

  function decode(col) {
    var bin = atob(col.b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var ctor = {float64: Float64Array, float32: Float32Array, uint16: Uint16Array,
                uint32: Uint32Array, int32: Int32Array}[col.t];
    return new ctor(bytes.buffer);
  }

  function niceStep(span, px) {
    var raw = span / Math.max(px / 90, 1), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = [1, 2, 5, 10].find(function (k) { return raw <= k * p; });
    return m * p;
  }

  function fmt(us) {
    return Math.abs(us) >= 1000 ? (us / 1000).toFixed(3) + " ms" : us.toFixed(3) + " us";
  }

  function Viewer(root) {
    var d = JSON.parse(document.getElementById(root.dataset.src).textContent);
    this.root = root; this.d = d; this.n = d.n;
    this.lane = decode(d.lane); this.start = decode(d.start); this.dur = decode(d.dur);
    this.labelIdx = decode(d.labelIdx); this.orderIdx = decode(d.orderIdx);
    this.seq = decode(d.seq); this.src = decode(d.src); this.dst = decode(d.dst);
    this.codeIdx = d.codeIdx ? decode(d.codeIdx) : null;   // source line(s) of each bar
    this.srcBox = root.querySelector(".sl-src");
    this.names = d.names.length ? d.names.split("\n") : [];
    this.row = Math.max(ROW, Math.min(ROW_MAX, Math.floor(FEW_LANES_PX / Math.max(d.lanes.length, 1))));
    this.canvas = root.querySelector("canvas");
    this.tip = root.querySelector(".sl-tip");
    this.arrowsBox = root.querySelector(".sl-arrows");
    this.stats = {draws: 0, lastMs: 0, times: []};
    this.selected = -1; this.hover = -1;
    this.index();
    this.reset();
    this.bind();
    this.resize();
  }

  Viewer.prototype.index = function () {
    var L = this.d.lanes.length, first = new Int32Array(L + 1), maxDur = new Float64Array(L);
    var end = 0, i;
    for (i = 0; i < this.n; i++) {
      first[this.lane[i] + 1]++;
      maxDur[this.lane[i]] = Math.max(maxDur[this.lane[i]], this.dur[i]);
      end = Math.max(end, this.start[i] + this.dur[i]);
    }
    for (i = 0; i < L; i++) first[i + 1] += first[i];
    this.first = first; this.maxDur = maxDur; this.end = end || 1;
    this.preds = {}; this.succs = {};
    for (i = 0; i < this.src.length; i++) {
      (this.succs[this.src[i]] = this.succs[this.src[i]] || []).push(this.dst[i]);
      (this.preds[this.dst[i]] = this.preds[this.dst[i]] || []).push(this.src[i]);
    }
  };

  Viewer.prototype.reset = function () { this.t0 = 0; this.span = this.end * 1.02; };

  Viewer.prototype.resize = function () {
    var w = Math.max(this.root.clientWidth, 300), h = AXIS + this.d.lanes.length * this.row + 4;
    var r = window.devicePixelRatio || 1;
    this.w = w; this.h = h;
    this.canvas.width = Math.round(w * r); this.canvas.height = Math.round(h * r);
    this.canvas.style.width = w + "px"; this.canvas.style.height = h + "px";
    this.ctx = this.canvas.getContext("2d");
    this.ctx.setTransform(r, 0, 0, r, 0, 0);
    this.draw();
  };

  Viewer.prototype.x = function (t) { return LEFT + (t - this.t0) * (this.w - LEFT) / this.span; };
  Viewer.prototype.t = function (x) { return this.t0 + (x - LEFT) * this.span / (this.w - LEFT); };

  // first bar of a lane that may reach time t (bars are sorted by start within a lane)
  Viewer.prototype.lowerBound = function (lane, t) {
    var lo = this.first[lane], hi = this.first[lane + 1];
    while (lo < hi) { var mid = (lo + hi) >> 1; if (this.start[mid] < t) lo = mid + 1; else hi = mid; }
    return lo;
  };

  // Bars are written straight into a pixel buffer, one scanline per lane copied down the
  // lane's height, then composited in one drawImage: with 100k bars in view this is far
  // cheaper than one fillRect (and fillStyle switch) per bar in a software rasteriser.
  Viewer.prototype.layer = function () {
    var W = this.canvas.width, H = this.canvas.height;
    if (!this.off || this.off.width !== W || this.off.height !== H) {
      this.off = document.createElement("canvas");
      this.off.width = W; this.off.height = H;
      this.offCtx = this.off.getContext("2d");
      this.img = this.offCtx.createImageData(W, H);
      this.px = new Uint32Array(this.img.data.buffer);
    }
    this.px.fill(0);
    this.ratio = W / this.w;
  };

  Viewer.prototype.queue = function (color, x, y, w) {
    var r = this.ratio, W = this.off.width, row = this.scan;
    var a = Math.max(Math.round(x * r), Math.round(LEFT * r)), b = Math.min(Math.round((x + w) * r), W);
    if (b <= a) b = a + 1;
    if (a >= W) return;
    var col = COLORS[color];
    for (var p = row + a; p < row + b; p++) this.px[p] = col;
  };

  Viewer.prototype.finishLane = function (lane) {
    var r = this.ratio, W = this.off.width;
    var y0 = Math.round((AXIS + lane * this.row + 1) * r), y1 = Math.round((AXIS + lane * this.row + this.row - 1) * r);
    for (var y = y0 + 1; y < y1; y++) this.px.copyWithin(y * W, y0 * W, y0 * W + W);
  };

  Viewer.prototype.paint = function (ctx) {
    this.offCtx.putImageData(this.img, 0, 0);
    ctx.drawImage(this.off, 0, 0, this.w, this.h);
  };

  // Bars 3 px or wider are queued one by one.  Narrower bars are binned per pixel column
  // (the column takes the colour of its longest bar) and touching columns of one colour
  // become one rect, so a lane costs at most ~one rect per pixel whatever the zoom.
  Viewer.prototype.drawLane = function (lane) {
    var self = this, y = AXIS + lane * this.row + 1, tEnd = this.t0 + this.span;
    this.scan = Math.round(y * this.ratio) * this.off.width;
    var i = this.lowerBound(lane, this.t0 - this.maxDur[lane]), stop = this.first[lane + 1];
    var k = (this.w - LEFT) / this.span, P = PALETTE.length;
    var minW = lane < this.d.coreLanes ? MIN_BAR : 1;
    var col = -1, colEnd = 0, colColor = 0, colBest = -1;
    var runX = -1, runEnd = 0, runColor = 0;
    function flushRun() {
      if (runX >= 0) self.queue(runColor, runX, y, Math.max(runEnd - runX, minW));
      runX = -1;
    }
    function flushCol() {
      if (col < 0) return;
      if (runX >= 0 && runColor === colColor && col <= runEnd + 1) runEnd = Math.max(runEnd, colEnd, col + 1);
      else { flushRun(); runX = col; runEnd = Math.max(colEnd, col + 1); runColor = colColor; }
      col = -1;
    }
    for (; i < stop && this.start[i] <= tEnd; i++) {
      var x0 = LEFT + (this.start[i] - this.t0) * k, x1 = x0 + this.dur[i] * k;
      if (x1 < LEFT) continue;
      var color = this.labelIdx[i] % P;
      if (x1 - x0 >= 3) {
        flushCol(); flushRun();
        this.queue(color, Math.max(x0, LEFT), y, x1 - Math.max(x0, LEFT));
        continue;
      }
      var c = Math.floor(Math.max(x0, LEFT));
      if (c !== col) { flushCol(); col = c; colEnd = x1; colBest = -1; }
      colEnd = Math.max(colEnd, x1, c + minW);
      if (this.dur[i] > colBest) { colBest = this.dur[i]; colColor = color; }
    }
    flushCol(); flushRun();
    this.finishLane(lane);
  };

  Viewer.prototype.drawAxis = function (ctx) {
    var step = niceStep(this.span, this.w - LEFT), t = Math.ceil(this.t0 / step) * step;
    ctx.fillStyle = "#333"; ctx.strokeStyle = "#e4e4e4"; ctx.font = "11px system-ui, sans-serif";
    ctx.textAlign = "center";
    for (; t <= this.t0 + this.span; t += step) {
      var x = this.x(t);
      ctx.beginPath(); ctx.moveTo(x, AXIS - 4); ctx.lineTo(x, this.h); ctx.stroke();
      ctx.fillText(+(t.toPrecision(6)) + " us", x, AXIS - 8);
    }
    ctx.textAlign = "left";
    ctx.fillText("time (us)", 4, 11);
  };

  Viewer.prototype.drawLabels = function (ctx) {
    ctx.fillStyle = "#fff"; ctx.fillRect(0, AXIS, LEFT - 2, this.h - AXIS);
    ctx.font = "10px system-ui, sans-serif"; ctx.textAlign = "right";
    for (var l = 0; l < this.d.lanes.length; l++) {
      ctx.fillStyle = l < this.d.coreLanes ? "#333" : "#7a4d00";
      ctx.fillText(this.d.lanes[l], LEFT - 6, AXIS + l * this.row + this.row - 3);
    }
  };

  Viewer.prototype.centre = function (i) {
    return [this.x(this.start[i] + this.dur[i] / 2), AXIS + this.lane[i] * this.row + this.row / 2];
  };

  Viewer.prototype.arrow = function (ctx, a, b) {
    var p = [this.x(this.start[a] + this.dur[a]), AXIS + this.lane[a] * this.row + this.row / 2];
    var q = [this.x(this.start[b]), AXIS + this.lane[b] * this.row + this.row / 2];
    ctx.moveTo(p[0], p[1]); ctx.lineTo(q[0], q[1]);
    ctx.moveTo(q[0], q[1]); ctx.lineTo(q[0] - 4, q[1] - 3);
    ctx.moveTo(q[0], q[1]); ctx.lineTo(q[0] - 4, q[1] + 3);
  };

  Viewer.prototype.drawArrows = function (ctx) {
    var all = this.arrowsBox && this.arrowsBox.checked, count = 0, i;
    ctx.beginPath(); ctx.strokeStyle = "rgba(0,0,0,0.55)"; ctx.lineWidth = 1;
    if (all) {
      var tEnd = this.t0 + this.span;
      for (i = 0; i < this.src.length && count < MAX_ARROWS; i++) {
        var a = this.src[i], b = this.dst[i];
        if (this.start[a] + this.dur[a] < this.t0 && this.start[b] < this.t0) continue;
        if (this.start[a] > tEnd) continue;
        this.arrow(ctx, a, b); count++;
      }
    }
    var s = this.selected;
    if (s >= 0) {
      (this.preds[s] || []).forEach(function (p) { this.arrow(ctx, p, s); }, this);
      (this.succs[s] || []).forEach(function (q) { this.arrow(ctx, s, q); }, this);
    }
    ctx.stroke();
    if (s >= 0) {
      ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
      var x0 = this.x(this.start[s]);
      ctx.strokeRect(x0, AXIS + this.lane[s] * this.row, Math.max(this.x(this.start[s] + this.dur[s]) - x0, 2), this.row);
      ctx.lineWidth = 1;
    }
  };

  Viewer.prototype.draw = function () {
    var t = performance.now(), ctx = this.ctx;
    ctx.clearRect(0, 0, this.w, this.h);
    this.drawAxis(ctx);
    this.layer();
    for (var l = 0; l < this.d.lanes.length; l++) this.drawLane(l);
    this.paint(ctx);
    this.drawArrows(ctx);
    this.drawLabels(ctx);
    var ms = performance.now() - t;
    this.stats.draws++; this.stats.lastMs = ms;
    if (this.stats.times.length < 2000) this.stats.times.push(ms);
  };

  Viewer.prototype.schedule = function () {
    var self = this;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(function () { self.pending = false; self.draw(); });
  };

  Viewer.prototype.panBy = function (px) {
    this.t0 -= px * this.span / (this.w - LEFT);
    this.schedule();
  };

  Viewer.prototype.zoomAt = function (x, factor) {
    var t = this.t(Math.max(x, LEFT));
    this.span = Math.max(this.span * factor, 1e-4);
    this.t0 = t - (Math.max(x, LEFT) - LEFT) * this.span / (this.w - LEFT);
    this.schedule();
  };

  Viewer.prototype.hit = function (x, y) {
    var lane = Math.floor((y - AXIS) / this.row);
    if (x < LEFT || lane < 0 || lane >= this.d.lanes.length) return -1;
    var t = this.t(x), slack = 3 * this.span / (this.w - LEFT), best = -1, gap = Infinity;
    var i = this.lowerBound(lane, t - this.maxDur[lane] - slack), stop = this.first[lane + 1];
    for (; i < stop && this.start[i] <= t + slack; i++) {
      var g = t < this.start[i] ? this.start[i] - t : Math.max(0, t - this.start[i] - this.dur[i]);
      if (g <= slack && g < gap) { gap = g; best = i; }
    }
    return best;
  };

  Viewer.prototype.describe = function (i) {
    var d = this.d, lines = [this.names[i] || "",
      "label: " + d.labels[this.labelIdx[i]],
      "lane: " + d.lanes[this.lane[i]],
      "start: " + fmt(this.start[i] + d.t0) + " (trace time)",
      "duration: " + fmt(this.dur[i])];
    if (this.seq[i] >= 0) lines.push("seqNo (dev task): " + this.seq[i]);
    var order = d.hashOrders[this.orderIdx[i]];
    lines.push("hashOrder: " + (order || "(none)"));
    if (this.lane[i] < d.coreLanes)
      lines.push("deps: " + (this.preds[i] || []).length + " in, " + (this.succs[i] || []).length + " out");
    if (this.codeIdx && this.codeIdx[i]) lines.push("source: " + d.codes[this.codeIdx[i]]);
    return lines.join("\n");
  };

  // the clicked task's source lines as links into the report's kernel source view
  Viewer.prototype.showSource = function (i) {
    var box = this.srcBox;
    if (!box) return;
    var k = i >= 0 && this.codeIdx ? this.codeIdx[i] : 0;
    box.textContent = "";
    if (i < 0) { box.textContent = "Click a task to link the Python line(s) that wrote its ops."; return; }
    if (!k) { box.textContent = (this.names[i] || "") + ": no Python source line"; return; }
    var text = this.d.codes[k], cut = text.lastIndexOf(":"), name = text.slice(0, cut);
    box.appendChild(document.createTextNode((this.names[i] || "") + " \u2014 source: " + name + ":"));
    text.slice(cut + 1).split(", ").forEach(function (n, j) {
      if (j) box.appendChild(document.createTextNode(","));
      var a = document.createElement("a");
      a.href = "#src-L" + n; a.textContent = n; a.className = "src-link";
      box.appendChild(a);
    });
  };

  Viewer.prototype.showTip = function (ev) {
    var r = this.canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    var i = this.hit(x, y);
    this.hover = i;
    if (i < 0) { this.tip.hidden = true; return; }
    this.tip.textContent = this.describe(i);   // textContent: names and labels stay text
    this.tip.hidden = false;
    this.tip.style.left = Math.min(x + 14, this.w - 260) + "px";
    this.tip.style.top = (y + 14) + "px";
  };

  Viewer.prototype.bind = function () {
    var self = this, c = this.canvas, drag = null;
    c.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = c.getBoundingClientRect();
      self.zoomAt(ev.clientX - r.left, Math.pow(1.0015, ev.deltaY));
    }, {passive: false});
    c.addEventListener("mousedown", function (ev) { drag = {x: ev.clientX, moved: false}; });
    window.addEventListener("mouseup", function (ev) {
      if (drag && !drag.moved && ev.target === c) {
        var r = c.getBoundingClientRect();
        self.selected = self.hit(ev.clientX - r.left, ev.clientY - r.top);
        self.showSource(self.selected);
        self.schedule();
      }
      drag = null;
    });
    c.addEventListener("mousemove", function (ev) {
      if (drag && ev.buttons) {
        var dx = ev.clientX - drag.x;
        if (Math.abs(dx) > 0) { drag.moved = true; drag.x = ev.clientX; self.panBy(dx); }
        self.tip.hidden = true;
      } else self.showTip(ev);
    });
    c.addEventListener("mouseleave", function () { self.tip.hidden = true; });
    c.addEventListener("dblclick", function () { self.reset(); self.schedule(); });
    var act = {"zoom-in": function () { self.zoomAt(LEFT + (self.w - LEFT) / 2, 0.5); },
               "zoom-out": function () { self.zoomAt(LEFT + (self.w - LEFT) / 2, 2); },
               "reset": function () { self.reset(); self.schedule(); }};
    this.root.querySelectorAll("button[data-act]").forEach(function (b) {
      b.addEventListener("click", act[b.dataset.act]);
    });
    if (this.arrowsBox) this.arrowsBox.addEventListener("change", function () { self.schedule(); });
    window.addEventListener("resize", function () { self.resize(); });
  };

  function start() {
    window.ptolabSwimlanes = [];
    document.querySelectorAll(".swimlane[data-src]").forEach(function (root) {
      window.ptolabSwimlanes.push(new Viewer(root));
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
