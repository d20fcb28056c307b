"""The training-data formats, a module each: a module declares its reader and everything training and `compclip concepts`
ask of the format (`readers.DataFormat`), and registers it in `readers.FORMATS`, which imports every module here (and
installed plugins', entry-point group `compclip.data_formats`) on its first read: a new format is a new file."""
