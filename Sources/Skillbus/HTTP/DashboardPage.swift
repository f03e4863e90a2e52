/// `GET /`: the dashboard, one page with its style and script inline (no CDN, no build step). It loads
/// `/state`, then follows `/events`: `agents` replaces the cards and skills, `round` one round of the list,
/// `feed` each feed event (an `agent.state` updates its card at once, a turn's event its session's timeline;
/// at every `state`, `/sessions` is loaded again: `DashboardSessions`). In a coordinator group it moves to the
/// leader's dashboard (`DashboardFollow`). Names are set as text, never as HTML.
enum DashboardPage {
    static let html = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Skillbus</title>
        <style>
        body { font: 14px system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
        header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; }
        header h1 { font-size: 18px; margin: 0; }
        #link[data-live="yes"]::before { content: "\\25cf  "; color: #3c3; }
        #link[data-live="no"]::before { content: "\\25cf  "; color: #c33; }
        main { padding: 16px 20px; display: grid; gap: 20px; }
        h2 { font-size: 15px; margin: 0 0 8px; }
        #agents { display: flex; flex-wrap: wrap; gap: 12px; }
        .card { background: #fff; border-radius: 6px; padding: 10px 14px; min-width: 190px; max-width: 300px; border-left: 5px solid #999; }
        .card[data-state="idle"] { border-color: #8a8; }
        .card[data-state="executingSkill"], .card[data-state="streaming"] { border-color: #27c; }
        .card[data-state="thinking"], .card[data-state="selectingSkill"] { border-color: #c90; }
        .card[data-state="failed"] { border-color: #c33; }
        .card .name { font-weight: 600; font-size: 15px; }
        .card .state { font-family: ui-monospace, monospace; }
        .bar { height: 6px; background: #e3e5ea; border-radius: 3px; margin: 6px 0; }
        .bar span { display: block; height: 100%; background: #27c; border-radius: 3px; }
        .muted { color: #6b7280; font-size: 12px; }
        table { border-collapse: collapse; background: #fff; width: 100%; }
        td, th { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e3e5ea; vertical-align: top; }
        .ok { color: #282; } .error { color: #c33; } .running, .waiting { color: #27c; }
        #log { font-family: ui-monospace, monospace; font-size: 12px; background: #fff; max-height: 220px; overflow: auto;
          padding: 6px 8px; white-space: pre; }
        \(DashboardSessions.style)
        </style>
        </head>
        <body>
        <header><h1>Skillbus</h1><span id="link" data-live="no">connecting</span>
          <span id="summary" class="muted"></span>\(DashboardFollow.header)</header>
        <main>
          <section><h2>Agents</h2><div id="agents"></div></section>
          <section><h2>Skills</h2><table><thead><tr><th>Skill</th><th>Providers</th></tr></thead>
            <tbody id="skills"></tbody></table></section>
          <section><h2>Latest rounds</h2><table><thead><tr><th>Round</th><th>Status</th><th>Invocations</th></tr></thead>
            <tbody id="rounds"></tbody></table></section>
          \(DashboardSessions.section)
          <section><h2>Feed</h2><div id="log"></div></section>
        </main>
        <script>
        "use strict";
        const rounds = new Map();
        function el(tag, attrs, ...children) {
          const node = document.createElement(tag);
          for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
          for (const child of children) node.append(child);
          return node;
        }
        \(DashboardSessions.script)
        \(DashboardFollow.script)
        function stateText(state) {
          if (state.state === "executingSkill") return "executingSkill " + (state.skill || "");
          if (state.state === "failed") return "failed: " + (state.reason || "");
          return state.state;
        }
        function setState(card, state) {
          card.dataset.state = state.state;
          card.dataset.skill = state.skill || "";
          card.querySelector(".state").textContent = stateText(state);
        }
        // A coordinator group's member says whether it leads and, as a standby, which one does (the page moves there).
        function groupText(group) {
          if (!group) return "";
          if (group.leading) return " \\u00b7 leads group " + group.group + " (epoch " + group.leader.epoch + ")" +
            (group.journalBacklog > 0 ? ", journal behind by " + group.journalBacklog : "");
          if (!group.leader) return " \\u00b7 standby of group " + group.group + ", no leader known";
          return " \\u00b7 standby of group " + group.group + ": the leader is " + group.leader.name + " at " +
            (group.leader.http || group.leader.bus + " (it serves no dashboard)");
        }
        function showAgents(view) {
          const agents = document.getElementById("agents");
          agents.replaceChildren(...view.agents.map(agent => {
            const load = agent.capacity > 0 ? Math.min(100, 100 * agent.inFlight / agent.capacity) : 0;
            const bar = el("div", {class: "bar"}, el("span", {style: "width:" + load + "%"}));
            const card = el("div", {class: "card", "data-agent": agent.agent},
              el("div", {class: "name"}, agent.agent), el("div", {class: "state"}), bar,
              el("div", {class: "muted"}, "load " + agent.inFlight + "/" + agent.capacity + " \\u00b7 executions ",
                el("span", {class: "executions"}, String(agent.executions))),
              el("div", {class: "muted"}, agent.skills.join(", ")));
            setState(card, agent.state);
            return card;
          }));
          document.getElementById("skills").replaceChildren(...view.skills.map(skill =>
            el("tr", {}, el("td", {}, skill.skill), el("td", {}, skill.providers.join(", ")))));
          document.getElementById("summary").textContent = view.agents.length + " agent(s) \\u00b7 " + view.waiting +
            " waiting \\u00b7 registry seq " + view.registry.seq + groupText(view.group);
          followGroup(view.group);
        }
        function showRound(round) {
          rounds.delete(round.round);
          rounds.set(round.round, round);
          while (rounds.size > 30) rounds.delete(rounds.keys().next().value);
          const rows = [...rounds.values()].reverse().map(entry => el("tr", {"data-round": entry.round},
            el("td", {}, entry.round.slice(0, 13), el("div", {class: "muted"}, entry.shape)),
            el("td", {class: entry.status}, entry.status + (entry.totalMs !== undefined ? " " + entry.totalMs.toFixed(1) + " ms" : "")),
            el("td", {}, ...entry.invocations.map(call => el("div", {class: call.status},
              call.id + " \\u2192 " + (call.skill || "?") + (call.agent ? " on " + call.agent : "") + ": " + call.status +
              (call.deduplicated ? " (deduplicated" + (call.reusing ? ", reusing " + call.reusing : "") + ")" : "") +
              (call.cached ? " (cached)" : ""))))));
          document.getElementById("rounds").replaceChildren(...rows);
        }
        function logEvent(event) {
          const log = document.getElementById("log");
          const line = event.time.slice(11, 23) + " " + event.type + " " + JSON.stringify(event) + "\\n";
          log.textContent = (line + log.textContent).slice(0, 20000);
        }
        function showState(view) {
          showAgents(view);
          rounds.clear();
          for (const round of [...view.rounds].reverse()) showRound(round);
        }
        fetch("/state").then(answer => answer.json()).then(showState);
        const events = new EventSource("/events");
        const link = document.getElementById("link");
        events.onopen = () => { link.dataset.live = "yes"; link.textContent = "live"; followLive(true); };
        events.onerror = () => { link.dataset.live = "no"; link.textContent = "reconnecting"; followLive(false); };
        events.addEventListener("state", message => {
          showState(JSON.parse(message.data));
          loadSessions();
        });
        events.addEventListener("agents", message => showAgents(JSON.parse(message.data)));
        events.addEventListener("round", message => showRound(JSON.parse(message.data)));
        events.addEventListener("skipped", message => logEvent({time: new Date().toISOString(), type: "skipped",
          events: JSON.parse(message.data).events}));
        events.addEventListener("feed", message => {
          const event = JSON.parse(message.data);
          logEvent(event);
          takeSessionEvent(event);
          if (event.type === "agent.state") {
            const card = document.querySelector('.card[data-agent="' + CSS.escape(event.agent) + '"]');
            if (card) setState(card, event);
          }
        });
        </script>
        </body>
        </html>
        """
}
