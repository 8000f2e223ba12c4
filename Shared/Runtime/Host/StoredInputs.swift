import FoundationEssentials
import Model

/// A device's input watermarks as stored beside its row, in a binary form
/// (`BinaryStoredRow`): written for every device a batch touched and read
/// whenever an evicted device comes back. As JSON (the form of earlier
/// releases, still read) they took a tenth of a consumer's time at 10,000
/// devices. The fields: the number of inputs, then per input its name, its
/// epoch (optional) and its seq.
struct StoredInputs: BinaryStoredRow {
    static let binaryVersion: UInt64 = 1
    static let binaryName = "the input watermarks"

    var marks: [String: InputMark]

    init(_ marks: [String: InputMark]) { self.marks = marks }

    func writeFields(to w: inout BinaryWriter) { w.write(marks) }

    init(readingFieldsFrom r: inout BinaryReader) throws { marks = try r.read() }

    /// Earlier releases stored the marks as a JSON object.
    init(from decoder: any Decoder) throws { marks = try [String: InputMark](from: decoder) }
}

extension InputMark: BinaryStorable {
    func write(to w: inout BinaryWriter) { w.write(epoch, seq) }
    init(from r: inout BinaryReader) throws { self.init(epoch: try r.read(), seq: try r.read()) }
}
