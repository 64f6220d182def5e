"""Pure parsers for the text formats checks collect: kernel logs, sysfs values, perftest, fio."""
