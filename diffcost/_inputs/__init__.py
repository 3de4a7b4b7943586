"""_inputs"""
