extension String {
    /// `bytes` as a String when they are UTF-8, nil when they are not. ASCII (nearly every id, skill name and
    /// JSON key) is checked with a plain loop and then decoded: `String(validating:as:)` is generic and looks
    /// its metadata up at run time on every call, which took about half of each short field's cost.
    init?(utf8 bytes: ArraySlice<UInt8>) {
        let text = bytes.withUnsafeBufferPointer { buffer -> String? in
            var high: UInt8 = 0
            for byte in buffer { high |= byte }
            return high < 0x80 ? String(decoding: buffer, as: UTF8.self) : String(validating: buffer, as: UTF8.self)
        }
        guard let text else { return nil }
        self = text
    }

    init?(utf8 bytes: [UInt8]) { self.init(utf8: bytes[...]) }
}
