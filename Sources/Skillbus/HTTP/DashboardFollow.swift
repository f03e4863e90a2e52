/// The dashboard's part that follows the leader of a coordinator group (PROTOCOL §13.7): a standby's page moves to
/// the leader's dashboard, and a page whose coordinator stops answering for 2 s (its event stream fails, or its
/// `/group`, asked every 3 s, gets no answer: a hung host leaves the stream open and silent) asks every member it heard of (`GET /group`, readable from any origin) which one leads, and moves there. A member is moved
/// to only once its own `/group` says it leads, so a page never lands on a dead or stale address (a browser's error
/// page would end the search); until one does, it asks again with a back-off, saying so in the header.
enum DashboardFollow {
    static let header = #"<span id="follow" class="muted" data-members=""></span>"#

    static let script = #"""
        const follow = {group: null, known: new Set(), stream: false, answers: true, live: false, seeking: false,
          delayMs: 500, downTimer: null};
        function followNote(text) { document.getElementById("follow").textContent = text; }
        // Every /state and agents event: remember each member's dashboard; a standby's page goes looking at once.
        function followGroup(group) {
          follow.group = group || null;
          if (!group) return;
          for (const member of group.members || []) if (member.http) follow.known.add(member.http);
          if (group.leader && group.leader.http) follow.known.add(group.leader.http);
          document.getElementById("follow").dataset.members = (group.members || []).map(m => m.name).join(",");
          if (!group.leading) seekLeader();
        }
        function followLive(stream) {
          follow.stream = stream;
          if (stream) follow.answers = true;
          followUpdate();
        }
        function followUpdate() {
          follow.live = follow.stream && follow.answers;
          if (follow.live) {
            clearTimeout(follow.downTimer);
            follow.downTimer = null;
          } else if (follow.downTimer === null) {
            // The event stream reconnects by itself; only a group's coordinator silent for 2 s sends the page away.
            follow.downTimer = setTimeout(() => {
              follow.downTimer = null;
              if (!follow.live && follow.group) seekLeader();
            }, 2000);
          }
        }
        // A coordinator whose host hung or vanished leaves the event stream open and silent: ask it every 3 s.
        setInterval(async () => {
          if (!follow.stream || !follow.group) return;
          const answers = (await askGroup(location.origin)) !== null;
          if (answers !== follow.answers) {
            const link = document.getElementById("link");
            link.dataset.live = answers ? "yes" : "no";
            link.textContent = answers ? "live" : "not answering";
          }
          follow.answers = answers;
          followUpdate();
        }, 3000);
        async function askGroup(url) {
          const abort = new AbortController();
          const timer = setTimeout(() => abort.abort(), 1500);
          try {
            const answer = await fetch(url.replace(/\/$/, "") + "/group", {cache: "no-store", signal: abort.signal});
            return answer.ok ? await answer.json() : null;
          } catch (error) {
            return null;
          } finally {
            clearTimeout(timer);
          }
        }
        async function seekLeader() {
          if (follow.seeking) return;
          follow.seeking = true;
          while (!(follow.live && follow.group && follow.group.leading)) {
            const queue = [];
            if (follow.group && follow.group.leader && follow.group.leader.http) queue.push(follow.group.leader.http);
            queue.push(...follow.known);
            const asked = new Set();
            while (queue.length > 0) {
              const url = queue.shift();
              if (asked.has(url)) continue;
              asked.add(url);
              const group = await askGroup(url);
              if (!group) continue;
              if (group.leading) {
                followNote("moving to the leader" + (group.leader ? " " + group.leader.name : "") + " at " + url);
                setTimeout(() => location.replace(url), 300);
                return;
              }
              // A standby names the leader it knows: ask that one too.
              if (group.leader && group.leader.http) {
                follow.known.add(group.leader.http);
                queue.push(group.leader.http);
              }
            }
            const leader = follow.group && follow.group.leader;
            followNote((follow.live ? "" : "this coordinator does not answer; ") +
              (leader && !leader.http && follow.live ? "the leader " + leader.name + " serves no dashboard; " : "") +
              (asked.size === 0 ? "no other member of the group is known" :
                "no dashboard of the " + asked.size + " member(s) known leads") +
              "; asking again in " + (follow.delayMs / 1000) + " s");
            await new Promise(resolve => setTimeout(resolve, follow.delayMs));
            follow.delayMs = Math.min(5000, follow.delayMs * 2);
          }
          follow.seeking = false;
          follow.delayMs = 500;
          followNote("");
        }
        """#
}
