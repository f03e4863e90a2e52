/// The timeline of one session, drawn by the dashboard's script as SVG (part of `DashboardSessions`).
///
/// Time runs left to right, but a turn of the rules planner passes in a millisecond, and sessions idle for
/// minutes between turns: so every event gets a position of its own, at least `minStep` pixels after the one
/// before; the distance follows the time (one scale for the whole session), but a stretch in which no turn
/// ran is at most `idleGap` pixels, marked with a dashed line and labelled with the time since the start.
enum DashboardTimeline {
    static let script = #"""
        // Turns and rows of a session: a top-level turn goes on its agent's row, a nested one on a row under
        // the row of the turn that asked for it. Each state, call and arrow keeps the index of its event.
        function layoutSession(session) {
          const turns = new Map(), rows = new Map(), roots = [], arrows = [];
          function turnOf(id, agent, event) {
            let turn = turns.get(id);
            if (!turn) {
              const parent = event && event.parent ? turns.get(event.parent) : undefined;
              const depth = event && event.depth ? event.depth : 0;
              const parentRow = parent ? parent.row : null;
              const key = depth > 0 ? (parentRow ? parentRow.key : "?") + ">" + agent : agent;
              let row = rows.get(key);
              if (!row) {
                const label = depth > 0
                  ? "\u21b3 " + agent + (parent ? " (asked by " + parent.agent + ")" : " (nested)") : agent;
                row = {key, agent, depth, label, children: [], calls: []};
                rows.set(key, row);
                (parentRow ? parentRow.children : roots).push(row);
              }
              turn = {id, agent, row, depth, parent, states: []};
              turns.set(id, turn);
            }
            return turn;
          }
          session.events.forEach((event, index) => {
            if (event.type === "agent.state" && event.turn) {
              turnOf(event.turn, event.agent, event).states.push({index, event});
            } else if (event.type === "turn.call") {
              turnOf(event.turn, event.agent).row.calls.push({index, event});
            } else if (event.type === "turn.delegated" || event.type === "turn.handoff") {
              arrows.push({index, event});
            }
          });
          const ordered = [];
          (function walk(list) { for (const row of list) { ordered.push(row); walk(row.children); } })(roots);
          return {turns, rows: ordered, arrows};
        }
        // A position for every event (see DashboardTimeline.swift), the idle stretches, a way from a time to a
        // position for what lies between events (a call's start), and where the present is while turns run.
        function timeAxis(session, plot, now) {
          const minStep = 6, idleGap = 48;
          const times = session.events.map(event => Date.parse(event.time));
          const running = new Set(), busy = [];
          let busyTime = 0, idleCount = 0;
          session.events.forEach((event, index) => {
            if (index > 0) {
              busy.push(running.size > 0);
              if (running.size > 0) busyTime += Math.max(times[index] - times[index - 1], 0); else idleCount += 1;
            }
            if (event.type === "agent.state" && event.turn) {
              if (event.state === "completed" || event.state === "failed") running.delete(event.turn);
              else running.add(event.turn);
            }
          });
          const live = session.running.size > 0, lastTime = times[times.length - 1];
          if (live) busyTime += Math.max(now - lastTime, 0);
          const perMs = Math.max(plot - idleCount * idleGap - times.length * minStep, plot / 3) / Math.max(busyTime, 1);
          const xs = [0], idle = [];
          for (let index = 1; index < times.length; index += 1) {
            const elapsed = Math.max(times[index] - times[index - 1], 0);
            const shortened = !busy[index - 1] && elapsed * perMs > idleGap;
            const step = shortened ? idleGap : Math.max(elapsed * perMs, minStep);
            if (shortened) idle.push({x: xs[index - 1] + idleGap / 2, ms: elapsed, at: times[index] - times[0]});
            xs.push(xs[index - 1] + step);
          }
          function at(time) {
            let index = 0;
            while (index + 1 < times.length && times[index + 1] <= time) index += 1;
            const limit = index + 1 < times.length ? xs[index + 1] : Infinity;
            return Math.max(Math.min(xs[index] + Math.max(time - times[index], 0) * perMs, limit), 0);
          }
          const last = xs[xs.length - 1];
          return {xs, idle, at, times, end: live ? last + Math.max((now - lastTime) * perMs, minStep) : last};
        }
        function drawTimeline(session) {
          const svg = document.getElementById("timeline");
          const title = document.getElementById("timeline-title");
          if (!session || session.events.length === 0) {
            svg.replaceChildren();
            svg.setAttribute("width", 0);
            svg.setAttribute("height", 0);
            title.textContent = "no session yet";
            return;
          }
          const {turns, rows, arrows} = layoutSession(session);
          const live = session.running.size > 0;
          const labelWidth = 200, rowHeight = 28, top = 26;
          const plot = Math.max(360, document.getElementById("timeline-box").clientWidth - labelWidth - 40);
          // While live, the running bars reach the present as the bus's clock has it (not the browser's).
          const now = session.last + (Date.now() - session.seenAt);
          const axis = timeAxis(session, plot, now);
          const endX = axis.end;
          const x = position => labelWidth + position;
          const rowIndex = new Map(rows.map((row, index) => [row.key, index]));
          const rowTop = row => top + rowIndex.get(row.key) * rowHeight;
          const width = labelWidth + endX + 40, height = top + rows.length * rowHeight + 6;
          svg.setAttribute("width", width);
          svg.setAttribute("height", height);
          title.textContent = "session " + session.id + (live ? " \u00b7 live" : " \u00b7 finished") + " \u00b7 " +
            session.events.length + " event(s)" + (session.dropped ? " (" + session.dropped + " older left out)" : "") +
            " \u00b7 each event has a place of its own; a stretch with no turn running is shortened";
          const parts = [svgEl("defs", {}, svgEl("marker", {id: "arrow", viewBox: "0 0 8 8", refX: 7, refY: 4,
            markerWidth: 7, markerHeight: 7, orient: "auto"}, svgEl("path", {d: "M0,0 L8,4 L0,8 z", fill: "#7a3db8"})))];
          parts.push(svgEl("text", {class: "tick", x: x(0), y: 12}, "0"));
          for (const gap of axis.idle) {
            parts.push(svgEl("line", {class: "grid", x1: x(gap.x), x2: x(gap.x), y1: top - 6, y2: height,
              "stroke-dasharray": "2 3"}, tip("nothing ran for " + duration(gap.ms))));
            parts.push(svgEl("text", {class: "tick", x: x(gap.x) + 2, y: 12}, "+" + duration(gap.at)));
          }
          const groups = new Map(rows.map(row => {
            const group = svgEl("g", {class: "row", "data-agent": row.agent, "data-depth": row.depth},
              svgEl("text", {x: 4 + 12 * row.depth, y: rowTop(row) + 18}, row.label, tip(row.label)));
            parts.push(group);
            return [row.key, group];
          }));
          for (const turn of turns.values()) {
            turn.states.forEach(({index, event}, order) => {
              const next = turn.states[order + 1];
              const ended = event.state === "completed" || event.state === "failed";
              const start = axis.xs[index];
              const until = next ? axis.xs[next.index] : ended ? start : session.running.has(turn.id) ? endX : start;
              const took = next ? axis.times[next.index] - axis.times[index] : ended ? 0 : now - axis.times[index];
              const text = turn.agent + ": " + event.state + (event.skill ? " " + event.skill : "") +
                (event.reason ? " (" + event.reason + ")" : "") + " \u00b7 " + duration(took) + " \u00b7 turn " + turn.id +
                (turn.parent ? ", asked by " + turn.parent.agent + "'s turn " + turn.parent.id : "") +
                " \u00b7 " + event.time.slice(11, 23);
              groups.get(turn.row.key).append(svgEl("rect", {class: "state", "data-state": event.state,
                "data-turn": turn.id, x: x(start), y: rowTop(turn.row) + 8, height: 14,
                width: Math.max(until - start, 3), fill: stateColours[event.state] || "#999"}, tip(text)));
            });
          }
          for (const row of rows) {
            const y = rowTop(row);
            for (const {index, event} of row.calls) {
              const call = event.call || {};
              const took = Number(call.durationMs) || 0;
              const text = "call " + (call.skill || "?") + (call.agent ? " on " + call.agent : "") + ": " +
                (call.status || "?") + ", " + duration(took) +
                (call.error && call.error.message ? " \u2014 " + call.error.message : "") +
                " \u00b7 " + event.time.slice(11, 23);
              const end = axis.xs[index];
              const group = groups.get(row.key);
              group.append(svgEl("line", {class: "span", x1: x(Math.min(axis.at(axis.times[index] - took), end)),
                x2: x(end), y1: y + 5, y2: y + 5}));
              group.append(svgEl("path", {class: "call", "data-skill": call.skill || "", "data-status": call.status || "",
                d: "M" + x(end) + "," + (y + 1) + " l4,5 l-4,5 l-4,-5 z"}, tip(text)));
            }
          }
          for (const {index, event} of arrows) {
            const from = turns.get(event.turn);
            const target = turns.get(event.type === "turn.delegated" ? event.child : event.next);
            const toRow = target ? target.row : rows.find(row => row.agent === event.to && row.depth === 0);
            const kind = event.type === "turn.delegated" ? "delegation" : "handoff";
            const text = kind === "delegation"
              ? event.agent + " asked " + event.to + (event.role ? " (" + event.role + ")" : "") + ": " +
                (event.message || "")
              : event.agent + " handed the session to " + event.to + (event.note ? ": " + event.note : "");
            if (!from) continue;
            const fromMiddle = rowTop(from.row) + rowHeight / 2;
            if (toRow && toRow.key !== from.row.key) {
              parts.push(svgEl("line", {class: kind, x1: x(axis.xs[index]), x2: x(axis.xs[index]), y1: fromMiddle,
                y2: rowTop(toRow) + rowHeight / 2, "marker-end": "url(#arrow)"}, tip(text)));
            } else {
              parts.push(svgEl("circle", {class: kind, cx: x(axis.xs[index]), cy: fromMiddle, r: 4}, tip(text)));
            }
          }
          svg.replaceChildren(...parts);
        }
        """#
}
