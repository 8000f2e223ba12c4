import Foundation
@testable import Runtime
import Testing

/// A device's input watermarks in their binary form: back as written, the
/// JSON of earlier releases still read, damage thrown, never trapped on.
@Suite struct StoredInputsTests {
    static let marks = ["raw": InputMark(epoch: "6f1c2a4e-8d3b-4c55-9e1f-1a2b3c4d5e6f", seq: 1 << 40),
                        "motion": InputMark(epoch: nil, seq: 0), "points": InputMark(epoch: "e", seq: 7)]

    @Test func everyMarkComesBack() throws {
        for marks in [[:], Self.marks] {
            let stored = StoredInputs.encode(marks)
            #expect(stored.first == 0xF1)
            #expect(try StoredInputs.decode(Data(stored)) == marks)
        }
    }

    @Test func theJSONOfAnEarlierReleaseStillReads() throws {
        #expect(try StoredInputs.decode(Data(#"{"raw":{"seq":5},"motion":{"epoch":"e","seq":2}}"#.utf8))
            == ["raw": InputMark(epoch: nil, seq: 5), "motion": InputMark(epoch: "e", seq: 2)])
        #expect(try StoredInputs.decode(Data("{}".utf8)).isEmpty)
    }

    @Test func damageIsThrown() {
        let stored = StoredInputs.encode(Self.marks)
        #expect(throws: (any Error).self) { try StoredInputs.decode(Data(stored.dropLast(2))) }
        #expect(throws: (any Error).self) { try StoredInputs.decode(Data(stored + [0])) }
        #expect(throws: (any Error).self) { try StoredInputs.decode(Data([0xF1, 9, 0])) }
        #expect(throws: (any Error).self) { try StoredInputs.decode(Data([0xF1, 1, 0xFF, 0xFF, 0xFF, 0x7F])) }
    }
}
