import Foundation
import Testing

@testable import Skillbus

/// What an agent writes straight to bytes on every turn — its STATEs, STEPs and the turn document — must be
/// the bytes the general path gives (the JSON values of §4.1 and §5.18, keys sorted).
@Suite("Turn bodies written straight to bytes")
struct TurnBodyWritingTests {
    static let states: [AgentState] = [
        .idle, .thinking, .selectingSkill, .streaming, .completed, .executingSkill("text.upper"),
        .delegating("role:critic"), .failed("the turn was \"cancelled\""),
    ]
    static let refs = [
        TurnRef(session: "s1", turn: "t1"),
        TurnRef(session: "", turn: "t2", parameters: ["text": "hi", "n": 2]),
        TurnRef(session: "s3", turn: "t3", parent: "t1", depth: 2),
        TurnRef(session: "s3", turn: "t4", parameters: ["a": []], parent: "t1", depth: 1),
    ]

    static func written(_ write: (inout [UInt8]) -> Void) -> [UInt8] {
        var out: [UInt8] = []
        write(&out)
        return out
    }

    @Test("a turn's STATE body is json(in:), and a document's state entry is json plus time")
    func states() {
        for state in Self.states {
            for ref in Self.refs {
                #expect(Self.written { state.write(in: ref, to: &$0) } == state.json(in: ref).serialized())
            }
            var entry = state.json.objectValue ?? [:]
            entry["time"] = "2026-12-06T08:00:00.000Z"
            let bytes = Self.written { state.write(in: nil, time: "2026-12-06T08:00:00.000Z", to: &$0) }
            #expect(bytes == JSONValue.object(entry).serialized())
        }
    }

    static let calls: [TurnCall] = [
        TurnCall(
            skill: "echo", parameters: ["text": "a\nb"], agent: "w1", durationMs: 0.1234, outcome: .success(.text("a"))),
        TurnCall(
            skill: "math.eval", parameters: [:], agent: "", durationMs: 0,
            outcome: .failure(SkillbusError(.invalidParameters, "no", details: ["field": "x"]))),
        TurnCall(
            skill: "", parameters: ["message": "draft it"], agent: "writer", durationMs: 12.5,
            outcome: .success(.json(["ok": true])), asked: AgentTarget("role:writer")!, nestedTurn: ["turn": "t9"]),
        TurnCall(
            skill: "", parameters: ["message": "x"], agent: "", durationMs: 1,
            outcome: .failure(SkillbusError(.timeout, "late")),
            asked: AgentTarget("critic")!),
    ]

    @Test("a STEP's call is TurnCall.json")
    func calls() {
        for call in Self.calls { #expect(Self.written(call.write) == call.json.serialized()) }
    }

    @Test("the turn document has every member of §5.18, in key order")
    func document() throws {
        let time = Date(timeIntervalSince1970: 1_790_000_000.25)
        let stamp = JSONValue.string(FeedEvent.timestamp(time))
        let team = TeamContext(
            parentTurnID: "t1", caller: "boss", depth: 1,
            handoff: TeamContext.Handoff(from: "writer", note: "yours", transcript: ["turn": "t0"]))
        let turn = TurnRequest(
            turnID: "t2", roundID: "r1", sessionID: "s1", deadlineMs: 1000, message: "hi", team: team)
        var record = TurnRecord(turn: turn, agent: "critic", role: "critic")
        record.states = [(.thinking, time), (.executingSkill("echo"), time)]
        record.ran = Array(Self.calls.prefix(2))
        record.reply = "done"
        record.handoff = HandoffRequest(to: AgentTarget("writer")!, note: "back to you")
        let error = SkillbusError(.timeout, "late")
        let expected: JSONValue = [
            "agent": "critic", "calls": .array(record.ran.map(\.json)), "depth": 1, "error": error.json,
            "handedOverBy": ["agent": "writer", "note": "yours", "turn": ["turn": "t0"]],
            "handoff": record.handoff!.json, "parent": "t1", "reply": "done", "role": "critic", "round": "r1",
            "session": "s1",
            "states": [
                ["state": "thinking", "time": stamp], ["skill": "echo", "state": "executingSkill", "time": stamp],
            ],
            "status": "error", "turn": "t2",
        ]
        #expect(record.document(status: "error", error: error) == expected.serialized())

        let plain = TurnRecord(
            turn: TurnRequest(turnID: "t3", roundID: "r2", sessionID: "", deadlineMs: 1, message: ""), agent: "a",
            role: nil)
        let bare: JSONValue = [
            "agent": "a", "calls": [], "reply": .null, "round": "r2", "session": "", "states": [], "status": "ok",
            "turn": "t3",
        ]
        #expect(plain.document(status: "ok") == bare.serialized())
    }
}
