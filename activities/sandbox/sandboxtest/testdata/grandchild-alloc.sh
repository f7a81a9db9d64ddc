sh -c "sh -c 'python3 -c \"b = bytearray(300 << 20); print(len(b))\"'"
