/// The dashboard's session view, part of `DashboardPage`: the live and latest sessions (from `/sessions`, then
/// the `feed` events of §7 with a `session`), and for the one chosen a timeline drawn as SVG by the page itself:
/// a row per agent (a nested turn's row under its parent's), its states as coloured bars, its calls as marks,
/// delegations and handoffs as arrows between rows; each with a tooltip. Names are set as text, never as HTML.
enum DashboardSessions {
    static let style = """
        #sessions tr { cursor: pointer; }
        #sessions tr.chosen { background: #e8f0fb; }
        #sessions td.live { color: #27c; } #sessions td.finished { color: #6b7280; }
        main > section { min-width: 0; }
        #timeline-box { background: #fff; padding: 8px; overflow-x: auto; }
        #timeline text { font: 12px system-ui, sans-serif; fill: #1d2330; }
        #timeline text.tick { fill: #6b7280; font-size: 11px; }
        #timeline line.grid { stroke: #e3e5ea; }
        #timeline .call { stroke: #1d2330; stroke-width: 1; }
        #timeline .call[data-status="error"] { fill: #c33; } #timeline .call[data-status="ok"] { fill: #fff; }
        #timeline line.span { stroke: #1d2330; stroke-width: 1; }
        #timeline .delegation, #timeline .handoff { stroke: #7a3db8; stroke-width: 1.5; fill: #7a3db8; }
        #timeline .handoff { stroke-dasharray: 4 2; }
        #legend { display: flex; flex-wrap: wrap; gap: 12px; margin: 6px 0; font-size: 12px; }
        #legend i { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle;
          border: 1px solid #0002; }
        """

    static let colours: [(state: String, colour: String)] = [
        ("thinking", "#d9a300"), ("selectingSkill", "#e07b00"), ("executingSkill", "#2277cc"),
        ("streaming", "#22a39a"), ("completed", "#2e8b3a"), ("failed", "#cc3333"), ("idle", "#9aa0a8"),
    ]

    static var section: String {
        let swatches = colours.map {
            #"<span data-state="\#($0.state)"><i style="background:\#($0.colour)"></i>\#($0.state)</span>"#
        }
        return """
            <section><h2>Sessions</h2><table><thead><tr><th>Session</th><th>Status</th><th>Agents</th>
              <th>Last event</th></tr></thead><tbody id="sessions"></tbody></table>
              <div id="legend">\(swatches.joined())<span><i style="background:#fff"></i>call ok</span>
                <span><i style="background:#c33"></i>call failed</span>
                <span><i style="background:#7a3db8"></i>delegation / handoff</span></div>
              <div id="timeline-box"><div id="timeline-title" class="muted">no session yet</div>
                <svg id="timeline" width="0" height="0"></svg></div></section>
            """
    }

    static var script: String {
        let table = colours.map { "\($0.state): \"\($0.colour)\"" }.joined(separator: ", ")
        return "const stateColours = {\(table)};\n" + logic + DashboardTimeline.script
    }

    private static let logic = #"""
        const sessionTopics = new Set(["agent.state", "turn.call", "turn.delegated", "turn.handoff"]);
        const sessionLimit = 16, sessionEventLimit = 400;
        const sessions = new Map();
        let chosenSession = null, chosenByHand = false, sessionsLoaded = false, pendingSessionEvents = [], redraw = null;
        function svgEl(tag, attrs, ...children) {
          // The namespace of the page's own <svg> (the HTML parser gives it): no address written in the page.
          const node = document.createElementNS(document.getElementById("timeline").namespaceURI, tag);
          for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
          for (const child of children) node.append(child);
          return node;
        }
        function tip(text) { return svgEl("title", {}, text); }
        function duration(ms) { return ms < 1000 ? ms.toFixed(1) + " ms" : (ms / 1000).toFixed(2) + " s"; }
        function sessionOf(id) {
          let session = sessions.get(id);
          if (!session) {
            session = {id, events: [], agents: [], running: new Map(), last: 0, seenAt: Date.now(), dropped: 0};
            sessions.set(id, session);
          }
          return session;
        }
        // One turn event into its session (most recently active last); turns end with completed or failed.
        function addSessionEvent(event) {
          const session = sessionOf(event.session);
          session.events.push(event);
          if (session.events.length > sessionEventLimit) {
            session.dropped += session.events.length - sessionEventLimit;
            session.events.splice(0, session.events.length - sessionEventLimit);
          }
          for (const name of [event.agent, event.to]) if (name && !session.agents.includes(name)) session.agents.push(name);
          if (event.type === "agent.state" && event.turn) {
            if (event.state === "completed" || event.state === "failed") session.running.delete(event.turn);
            else session.running.set(event.turn, event.agent);
          }
          session.last = Math.max(session.last, Date.parse(event.time));
          session.seenAt = Date.now();
          sessions.delete(session.id);
          sessions.set(session.id, session);
          while (sessions.size > sessionLimit) sessions.delete(sessions.keys().next().value);
        }
        function eventKey(e) {
          return [e.type, e.time, e.agent, e.turn, e.state, e.skill, e.reason, e.call && e.call.skill,
            e.call && e.call.durationMs, e.child, e.next].join("|");
        }
        // At every (re)connection: the history, then the live events that came meanwhile and are not in it.
        function loadSessions() {
          sessionsLoaded = false;
          fetch("/sessions").then(answer => answer.json()).then(view => {
            sessions.clear();
            const seen = new Map();
            for (const entry of [...view.sessions].reverse()) {
              for (const event of entry.events) {
                addSessionEvent(event);
                seen.set(eventKey(event), (seen.get(eventKey(event)) || 0) + 1);
              }
              const session = sessionOf(entry.session);
              session.running = new Map(Object.entries(entry.running));
              session.dropped = entry.dropped;
            }
            sessionsLoaded = true;
            for (const event of pendingSessionEvents.splice(0)) {
              const count = seen.get(eventKey(event)) || 0;
              if (count > 0) seen.set(eventKey(event), count - 1);
              else takeSessionEvent(event);
            }
            showSessions();
          });
        }
        function takeSessionEvent(event) {
          if (!sessionsLoaded) {
            if (sessionTopics.has(event.type) || event.type === "agent.left") pendingSessionEvents.push(event);
            return;
          }
          if (event.type === "agent.left") {
            for (const session of sessions.values())
              for (const [turn, agent] of session.running) if (agent === event.agent) session.running.delete(turn);
          } else if (sessionTopics.has(event.type) && event.session) {
            addSessionEvent(event);
          } else {
            return;
          }
          if (redraw === null) redraw = setTimeout(() => { redraw = null; showSessions(); }, 50);
        }
        function showSessions() {
          const list = [...sessions.values()].reverse();
          if (!chosenByHand || !sessions.has(chosenSession))
            chosenSession = (list.find(session => session.running.size > 0) || list[0] || {}).id || null;
          document.getElementById("sessions").replaceChildren(...list.map(session => {
            const live = session.running.size > 0;
            const row = el("tr", {"data-session": session.id, "data-live": live ? "yes" : "no"},
              el("td", {}, session.id), el("td", {class: live ? "live" : "finished"}, live ? "live" : "finished"),
              el("td", {}, session.agents.join(", ")), el("td", {}, new Date(session.last).toISOString().slice(11, 23)));
            if (session.id === chosenSession) row.classList.add("chosen");
            row.addEventListener("click", () => { chosenSession = session.id; chosenByHand = true; showSessions(); });
            return row;
          }));
          drawTimeline(sessions.get(chosenSession));
        }
        setInterval(() => {
          const session = sessions.get(chosenSession);
          if (session && session.running.size > 0) drawTimeline(session);
        }, 500);
        """#
}
