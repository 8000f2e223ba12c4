import Foundation
import Model
@testable import Runtime
import Testing

/// A device's input watermarks in their binary form: back as written, the
/// JSON of earlier releases still read, damage thrown, never trapped on.
@Suite struct StoredInputsTests {
    static let marks = ["raw": InputMark(epoch: "6f1c2a4e-8d3b-4c55-9e1f-1a2b3c4d5e6f", seq: 1 << 40),
                        "motion": InputMark(epoch: nil, seq: 0), "points": InputMark(epoch: "e", seq: 7)]

    @Test func everyMarkComesBack() throws {
        for marks in [[:], Self.marks] {
            let stored = StoredInputs(marks).stored
            #expect(stored.first == 0xF1)
            #expect(try StoredInputs.restored(from: Data(stored), using: JSONCoding.decoder).marks == marks)
        }
    }

    @Test func theJSONOfAnEarlierReleaseStillReads() throws {
        #expect(try StoredInputs.restored(from: Data(#"{"raw":{"seq":5},"motion":{"epoch":"e","seq":2}}"#.utf8), using: JSONCoding.decoder).marks
            == ["raw": InputMark(epoch: nil, seq: 5), "motion": InputMark(epoch: "e", seq: 2)])
        #expect(try StoredInputs.restored(from: Data("{}".utf8), using: JSONCoding.decoder).marks.isEmpty)
    }

    @Test func damageIsThrown() {
        let stored = StoredInputs(Self.marks).stored
        #expect(throws: (any Error).self) { try StoredInputs.restored(from: Data(stored.dropLast(2)), using: JSONCoding.decoder) }
        #expect(throws: (any Error).self) { try StoredInputs.restored(from: Data(stored + [0]), using: JSONCoding.decoder) }
        #expect(throws: (any Error).self) { try StoredInputs.restored(from: Data([0xF1, 9, 0]), using: JSONCoding.decoder) }
        #expect(throws: (any Error).self) { try StoredInputs.restored(from: Data([0xF1, 1, 0xFF, 0xFF, 0xFF, 0x7F]), using: JSONCoding.decoder) }
    }
}
