import Testing

@testable import Skillbus

/// The table single-flight keeps its rounds in: byte-string keys, slots that stay put.
@Suite("Slot table")
struct SlotTableTests {
    func key(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("keys are found in the slots they were given, through growth")
    func insertAndFind() {
        var table = SlotTable<[UInt8], Int>()
        var slots: [Int] = []
        for index in 0..<5000 {
            let (slot, inserted) = table.slot(of: key("round-\(index)")) { index }
            #expect(inserted)
            slots.append(slot)
        }
        #expect(table.count == 5000)
        #expect(Set(slots).count == 5000)
        for index in 0..<5000 {
            #expect(table.slot(of: key("round-\(index)")) == slots[index])
            #expect(table[slots[index]] == index)
        }
        #expect(table.slot(of: key("round-5000")) == nil)
        #expect(table.slot(of: []) == nil)
        // Asking again finds the old slot and does not make a new value.
        let again = table.slot(of: key("round-7")) {
            Issue.record("made a second value")
            return -1
        }
        #expect(again.slot == slots[7] && !again.inserted && table[again.slot] == 7)
    }

    @Test("values change in place, and a removed key is gone while its slot serves the next key")
    func modifyAndRemove() {
        var table = SlotTable<[UInt8], [String]>()
        let a = table.slot(of: key("a")) { [] }.slot
        let b = table.slot(of: key("b")) { ["b"] }.slot
        table[a].append("one")
        table[a].append("two")
        #expect(table[a] == ["one", "two"])
        #expect(table.remove(slot: a) == ["one", "two"])
        #expect(!table.isOccupied(a) && table.isOccupied(b))
        #expect(table.slot(of: key("a")) == nil && table.slot(of: key("b")) == b)
        let c = table.slot(of: key("c")) { ["c"] }
        #expect(c.inserted && c.slot == a && table[c.slot] == ["c"] && table.count == 2)
        #expect(table.occupiedSlots == [a, b].sorted() && table.key(a) == key("c"))
        table.remove(slot: b)
        #expect(table.occupiedSlots == [a])
        #expect(!table.isOccupied(99))
    }

    @Test("random inserts and removals agree with a dictionary", arguments: [1, 2, 3])
    func agreesWithDictionary(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var table = SlotTable<[UInt8], Int>()
        var model: [[UInt8]: (slot: Int, value: Int)] = [:]
        // A small key space, so that keys come and go many times and probe runs wrap around and shift.
        for step in 0..<20_000 {
            let name = key("k\(Int.random(in: 0..<300, using: &random))")
            if let known = model[name], Bool.random(using: &random) {
                #expect(table.remove(slot: known.slot) == known.value)
                model[name] = nil
            } else {
                let (slot, inserted) = table.slot(of: name) { step }
                #expect(inserted == (model[name] == nil))
                if inserted { model[name] = (slot, step) }
                #expect(model[name]!.slot == slot && table[slot] == model[name]!.value)
            }
            #expect(table.count == model.count)
        }
        for (name, entry) in model {
            #expect(table.slot(of: name) == entry.slot && table[entry.slot] == entry.value)
        }
        for index in 0..<300 where model[key("k\(index)")] == nil {
            #expect(table.slot(of: key("k\(index)")) == nil)
        }
    }
}
