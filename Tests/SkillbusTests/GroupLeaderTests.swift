import Testing

@testable import Skillbus
@testable import SkillbusCommands

/// The standby's refusal names the leader in a form a client can follow (PROTOCOL §3.11).
struct GroupLeaderTests {
    let leader = GroupLeader(
        name: "a", bus: "tcp://10.0.0.1:5555", feed: "tcp://10.0.0.1:5556", epoch: 4, since: "2026-12-05T21:00:00.000Z")

    @Test func refusalRoundTripsThroughTheWireForm() throws {
        let refusal = SkillbusError.notLeader(group: "g1", standby: "b", leader: leader)
        #expect(refusal.code == .notLeader)
        #expect(refusal.message.contains("the leader is 'a' at tcp://10.0.0.1:5555 (epoch 4)"))
        let read = SkillbusError(json: try JSONValue(parsing: refusal.json.serialized()))
        #expect(read.leader == leader)
        #expect(read.details?["epoch"]?.intValue == 4)
        #expect(read.details?["group"]?.stringValue == "g1")
    }

    @Test func refusalWithoutALeaderSaysSo() {
        let refusal = SkillbusError.notLeader(group: "g1", standby: "b", leader: nil)
        #expect(refusal.leader == nil)
        #expect(refusal.details?["leader"] == .null)
        #expect(refusal.message.hasSuffix("no leader is known yet"))
    }

    @Test func otherErrorsNameNoLeaderAndBrokenLeadersAreNone() {
        #expect(SkillbusError(.busy, "full", details: .object(["leader": leader.json])).leader == nil)
        #expect(GroupLeader(json: .object(["name": .string("a"), "bus": .string("tcp://x:1")])) == nil)
    }

    @Test("skillbus feed shows who leads, and when the journal is behind")
    func feedLines() throws {
        func line(_ event: FeedEvent) throws -> String {
            FeedCommand.render(topic: event.topic, event: try JSONValue(parsing: event.encoded()[1]))
        }
        let leading = try line(.coordinatorLeader(group: "g1", epoch: 4, leader: leader))
        #expect(
            leading.contains("coordinator.leader")
                && leading.hasSuffix("group g1: 'a' leads at tcp://10.0.0.1:5555 (epoch 4)"))
        #expect(
            try line(.journalBehind(group: "g1", rounds: 3)).hasSuffix("group g1: the journal is behind by 3 round(s)"))
        #expect(try line(.journalBehind(group: "g1", rounds: 0)).hasSuffix("group g1: the journal caught up"))
    }
}

/// The leader object's dashboard (PROTOCOL §3.11): present when the leader serves one, absent otherwise, so the
/// wire form of a leader without HTTP is what it was.
struct GroupLeaderHTTPTests {
    @Test func httpRoundTripsAndIsLeftOutWhenNone() throws {
        let serving = GroupLeader(name: "a", bus: "tcp://h:1", feed: "tcp://h:2", epoch: 2, since: "", http: "http://h:8080")
        #expect(GroupLeader(json: try JSONValue(parsing: serving.json.serialized())) == serving)
        let silent = GroupLeader(name: "a", bus: "tcp://h:1", feed: "tcp://h:2", epoch: 2, since: "")
        #expect(silent.json["http"] == nil && GroupLeader(json: silent.json) == silent)
    }
}
